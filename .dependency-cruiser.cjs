// The architecture as a rule (npm run lint): no import circles, and data flows down
// once — a folder of src/ imports only folders in layers below its own (or beside it,
// in the same layer, where the layer names several). docs/development.md draws the layers.
const layers = [
  ['config', 'fhir'],
  ['db'],
  ['auth', 'search', 'fhirpath'],
  ['topics', 'metrics', 'loading'],
  ['channels'],
  ['subscriptions'],
  ['mail'],
  ['dispatch'],
  ['resources', 'operations'],
  ['api'],
  ['cli', 'service.ts'],
];

const folderPath = (name) => (name.endsWith('.ts') ? `^src/${name.replace('.', '\\.')}$` : `^src/${name}/`);

const upwardImports = layers.slice(0, -1).flatMap((layer, level) =>
  layer.map((name) => ({
    name: `no-upward-import-from-${name.replace('.ts', '')}`,
    comment: `src/${name} may only import layers below it (${
      layers.slice(0, level).flat().join(', ') || 'none'
    }); what crosses the boundary belongs in the lower layer`,
    severity: 'error',
    from: { path: folderPath(name) },
    to: {
      path: layers
        .slice(level + 1)
        .flat()
        .map(folderPath),
    },
  })),
);

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'An import circle: whichever file the circle is entered by sees the others half-initialised, and no file of it can be read alone.',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true },
    },
    ...upwardImports,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.json'] },
  },
};
