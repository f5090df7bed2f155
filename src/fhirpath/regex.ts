import { FhirPathRefused, type Location } from './parse.ts';

/**
 * A matches() pattern, a JavaScript regular expression as fhirpath.js runs
 * it (flags s and u: `.` matches any character, a newline too), rewritten as
 * a PostgreSQL advanced regular expression that matches exactly the same
 * strings, or refused. What is taken: characters, `.`, `^` and `$` (of the
 * whole string, as in both without the m flag), classes `[a-z]` and `[^…]`,
 * `\d`, `\w`, `\s` and their negations (as JavaScript defines them: ASCII
 * digits and word characters, its own list of spaces; PostgreSQL's depend on
 * the locale, so each is written out), escaped characters, groups `(…)` and
 * `(?:…)`, `|`, and the quantifiers `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`
 * (lazy or not: whether a string matches does not depend on it). Refused:
 * backreferences, lookarounds, named groups, word boundaries (`\b`: the two
 * disagree on what a word character is), Unicode properties, anything
 * JavaScript itself rejects in unicode mode, bounds over PostgreSQL's 255, and
 * a pattern that would expand past 100 characters, an anchor or an empty
 * group counting as one (PostgreSQL compiles a pattern once per connection,
 * inside the writing transaction: (?:(?:\S?){250}){4} took it 25 s), and a
 * \u escape of half a surrogate pair (JavaScript joins a pair into one
 * character; PostgreSQL does not).
 */
export function postgresRegex(pattern: string, at: Location): string {
  const reader = new PatternReader(pattern, at);
  const { text, size } = reader.alternation();
  if (!reader.atEnd()) reader.refuse(`an unbalanced ${reader.peek()}`);
  if (size > maxExpandedSize) reader.refuse(`a pattern of ${size} characters once its repetitions are expanded; at most ${maxExpandedSize} are taken`);
  return text;
}

/**
 * At 1,000 PostgreSQL took up to 25 s to compile an accepted pattern
 * ((?:(?:\S?){250}){4}, a review's finding); at 100 the worst tried took 5 ms.
 */
const maxExpandedSize = 100;
/** PostgreSQL's largest repetition count (RE_DUP_MAX). */
const maxRepetition = 255;

/** JavaScript's \s: its WhiteSpace and LineTerminator characters, as \u escapes both engines read alike. */
const javascriptSpaces = ['0009-000d', '0020', '00a0', '1680', '2000-200a', '2028', '2029', '202f', '205f', '3000', 'feff']
  .map((range) =>
    range
      .split('-')
      .map((code) => `\\u${code}`)
      .join('-'),
  )
  .join('');
const classEscapes: Record<string, string> = { d: '0-9', w: 'A-Za-z0-9_', s: javascriptSpaces };
const controlEscapes = new Set(['n', 't', 'r', 'f', 'v']);
const syntaxCharacters = new Set([...'^$\\.*+?()[]{}|/']);

type Piece = { text: string; size: number };

class PatternReader {
  private readonly pattern: string;
  private readonly at: Location;
  private readonly characters: string[];
  private position = 0;

  constructor(pattern: string, at: Location) {
    this.pattern = pattern;
    this.at = at;
    this.characters = [...pattern];
  }

  refuse(what: string): never {
    throw new FhirPathRefused(
      `matches('${this.pattern}')`,
      this.at,
      `${what}: not taken in a pattern, which must match in PostgreSQL exactly as in JavaScript`,
    );
  }

  atEnd(): boolean {
    return this.position >= this.characters.length;
  }

  peek(offset = 0): string | undefined {
    return this.characters[this.position + offset];
  }

  private next(): string {
    const character = this.characters[this.position++];
    if (character === undefined) this.refuse('a pattern that ends too soon');
    return character;
  }

  alternation(): Piece {
    const alternatives = [this.sequence()];
    while (this.peek() === '|') {
      this.position++;
      alternatives.push(this.sequence());
    }
    return { text: alternatives.map((piece) => piece.text).join('|'), size: alternatives.reduce((sum, piece) => sum + piece.size, 0) };
  }

  private sequence(): Piece {
    const pieces: Piece[] = [];
    while (!this.atEnd() && this.peek() !== '|' && this.peek() !== ')') {
      const atom = this.atom();
      pieces.push(atom.anchor ? atom : this.quantified(atom));
    }
    return { text: pieces.map((piece) => piece.text).join(''), size: pieces.reduce((sum, piece) => sum + piece.size, 0) };
  }

  private atom(): Piece & { anchor?: true } {
    const character = this.next();
    switch (character) {
      case '(':
        return this.group();
      case '[':
        return { text: this.characterClass(), size: 1 };
      case '.':
        return { text: '.', size: 1 };
      case '^':
      case '$':
        // Counted as one: a group of anchors or of nothing, repeated, still costs PostgreSQL states.
        return { text: character, size: 1, anchor: true };
      case '\\':
        return { text: this.escape(false), size: 1 };
      case '*':
      case '+':
      case '?':
      case '{':
        return this.refuse(`a quantifier ${character} with nothing to repeat`);
      case ']':
      case '}':
        return this.refuse(`an unescaped ${character}`);
      default:
        return { text: character, size: 1 };
    }
  }

  private group(): Piece {
    let opening = '(';
    if (this.peek() === '?') {
      if (this.peek(1) !== ':') this.refuse(`a group (?${this.peek(1) ?? ''}… (lookarounds and named groups)`);
      this.position += 2;
      opening = '(?:';
    }
    const inner = this.alternation();
    if (this.peek() !== ')') this.refuse('an unbalanced (');
    this.position++;
    return { text: `${opening}${inner.text})`, size: Math.max(inner.size, 1) };
  }

  private quantified(atom: Piece): Piece {
    const character = this.peek();
    let quantifier: string;
    let times = 1;
    if (character === '*' || character === '+' || character === '?') {
      this.position++;
      quantifier = character;
    } else if (character === '{') {
      const bound = /^\{(\d+)(,(\d*))?\}/.exec(this.characters.slice(this.position).join(''));
      if (bound === null) this.refuse('a { that is not a repetition count');
      this.position += [...bound[0]].length;
      const least = Number(bound[1]);
      const most = bound[3] === undefined || bound[3] === '' ? undefined : Number(bound[3]);
      if (most !== undefined && most < least) this.refuse(`the repetition ${bound[0]}, out of order`);
      if (Math.max(least, most ?? 0) > maxRepetition) this.refuse(`the repetition ${bound[0]}, over PostgreSQL's ${maxRepetition}`);
      quantifier = bound[0];
      times = Math.max(most ?? least, 1);
    } else {
      return atom;
    }
    if (this.peek() === '?') {
      this.position++;
      quantifier += '?';
    }
    const after = this.peek();
    if (after === '*' || after === '+' || after === '?' || after === '{') this.refuse(`a quantifier ${after} after a quantifier`);
    return { text: `${atom.text}${quantifier}`, size: atom.size * times };
  }

  /** After a backslash: the same escape for PostgreSQL, or what it stands for written out. */
  private escape(inClass: boolean): string {
    const character = this.next();
    const set = classEscapes[character.toLowerCase()];
    if (set !== undefined) {
      const negated = character !== character.toLowerCase();
      if (inClass) return negated ? this.refuse(`\\${character} in a class`) : set;
      return `[${negated ? '^' : ''}${set}]`;
    }
    if (controlEscapes.has(character)) return `\\${character}`;
    if (character === 'u') {
      const hex = this.characters.slice(this.position, this.position + 4).join('');
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.refuse('a \\u escape without four hexadecimal digits (\\u{…} included)');
      // JavaScript joins \ud83d\ude00 into one character in unicode mode; PostgreSQL reads two surrogates, which never match.
      if (/^d[89a-f]/i.test(hex)) this.refuse(`the escape \\u${hex}, half of a surrogate pair (write the character itself)`);
      this.position += 4;
      return `\\u${hex}`;
    }
    if (character === 'x') {
      const hex = this.characters.slice(this.position, this.position + 2).join('');
      if (!/^[0-9a-fA-F]{2}$/.test(hex)) this.refuse('a \\x escape without two hexadecimal digits');
      this.position += 2;
      // PostgreSQL's \x takes as many digits as follow: written as \u, it takes four.
      return `\\u00${hex}`;
    }
    if (syntaxCharacters.has(character) || (inClass && character === '-')) return `\\${character}`;
    if (character === 'b' || character === 'B') return this.refuse(`the word boundary \\${character}`);
    if (/[0-9]/.test(character)) return this.refuse(`the escape \\${character} (a backreference or a NUL)`);
    return this.refuse(`the escape \\${character}`);
  }

  /** After a [: the class, its characters escaped as PostgreSQL reads them inside brackets. */
  private characterClass(): string {
    const negated = this.peek() === '^';
    if (negated) this.position++;
    if (this.peek() === ']') this.refuse(negated ? 'the class [^]' : 'the empty class []');
    let members = '';
    while (this.peek() !== ']') {
      const from = this.classMember();
      if (this.peek() === '-' && this.peek(1) !== ']' && this.peek(1) !== undefined) {
        this.position++;
        const to = this.classMember();
        if (from.character === undefined || to.character === undefined) this.refuse('a range with a class escape at an end');
        if (from.character.codePointAt(0)! > to.character.codePointAt(0)!) this.refuse(`the range ${from.character}-${to.character}, out of order`);
        members += `${from.text}-${to.text}`;
      } else {
        members += from.text;
      }
    }
    this.position++;
    return `[${negated ? '^' : ''}${members}]`;
  }

  /** One member of a class: a character (which a range may end at) or a set such as \d. */
  private classMember(): { text: string; character?: string } {
    const character = this.next();
    if (character !== '\\') return { text: '\\^[]-'.includes(character) ? `\\${character}` : character, character };
    const escaped = this.escape(true);
    // \u0041 and \. stand for one character; \d, \w and \s for sets.
    if (escaped.startsWith('\\u')) return { text: escaped, character: String.fromCodePoint(parseInt(escaped.slice(2), 16)) };
    if (escaped.length === 2 && escaped.startsWith('\\') && !controlEscapes.has(escaped[1]!)) return { text: escaped, character: escaped[1] };
    if (escaped.length === 2 && controlEscapes.has(escaped[1]!)) return { text: escaped, character: controlCharacter[escaped[1]!] };
    return { text: escaped };
  }
}

const controlCharacter: Record<string, string> = { n: '\n', t: '\t', r: '\r', f: '\f', v: '\v' };
