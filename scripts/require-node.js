// Plain JavaScript on purpose: it must run on any Node, to say which one the
// service needs before an older Node fails on the TypeScript sources with
// ERR_UNKNOWN_FILE_EXTENSION. npm start, npm run cli and npm test load it first.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 18)) {
  console.error(
    `This project needs Node 22.18 or newer (24 recommended, see .nvmrc); this is Node ${process.versions.node}. ` +
      'Get it with `nvm install` in this folder (it reads .nvmrc), or from https://nodejs.org.',
  );
  process.exit(1);
}
