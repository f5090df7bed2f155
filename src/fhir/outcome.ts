/** FHIR issue codes this service uses (http://hl7.org/fhir/issue-type). */
export type IssueCode =
  | 'invalid'
  | 'structure'
  | 'required'
  | 'value'
  | 'security'
  | 'login'
  | 'forbidden'
  | 'not-found'
  | 'deleted'
  | 'conflict'
  | 'multiple-matches'
  | 'not-supported'
  | 'too-costly'
  | 'throttled'
  | 'timeout'
  | 'lock-error'
  | 'transient'
  | 'processing'
  | 'exception'
  | 'informational';

export type OperationOutcome = {
  resourceType: 'OperationOutcome';
  issue: {
    severity: 'fatal' | 'error' | 'warning' | 'information';
    code: IssueCode;
    details?: { text: string };
    diagnostics?: string;
    expression?: string[];
  }[];
};

export function operationOutcome(code: IssueCode, text: string, severity: OperationOutcome['issue'][number]['severity'] = 'error'): OperationOutcome {
  return { resourceType: 'OperationOutcome', issue: [{ severity, code, details: { text } }] };
}

/** An error that the HTTP layer answers with `status` and an OperationOutcome. */
export class FhirError extends Error {
  override name = 'FhirError';
  readonly status: number;
  readonly outcome: OperationOutcome;

  constructor(status: number, code: IssueCode, text: string) {
    super(text);
    this.status = status;
    this.outcome = operationOutcome(code, text);
  }
}

/** The Subscription specification's refusal: 400, code `exception`, details.text `ValidationError: ['<message>']`. */
export function refusal(message: string): FhirError {
  return new FhirError(400, 'exception', `ValidationError: ['${message}']`);
}

export const badRequest = (text: string, code: IssueCode = 'invalid') => new FhirError(400, code, text);
export const notFound = (text: string) => new FhirError(404, 'not-found', text);
