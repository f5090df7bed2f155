# syntax=docker/dockerfile:1
# The service image: API and (from the dispatcher on) workers, Node 24, non-root.
# It always runs against DATABASE_URL; the embedded PostgreSQL is for local use only.

FROM node:24-bookworm-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
# Optional dependencies are the embedded PostgreSQL binaries; dev ones are the toolchain.
RUN npm ci --omit=dev --omit=optional --ignore-scripts && npm cache clean --force

FROM node:24-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json ./
COPY db ./db
COPY src ./src
# npm run cli checks the Node version first (package.json).
COPY scripts/require-node.js ./scripts/
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s CMD ["node", "-e", "fetch('http://127.0.0.1:8080/readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# V8 sizes its heap by the machine's memory (a young generation of 128 MiB on
# 24 GiB) and lets garbage pile up to several times the live heap (60-80 MiB
# in a busy worker) before it collects: a worker peaked at 431 MiB in npm run
# bench, 248 MiB with semi-spaces of 8 MiB and the old generation grown by
# half, not up to 4 times, between collections. Neither is a limit: a heap
# that needs more still gets it. npm start and npm run cli (package.json)
# pass the same flags.
CMD ["node", "--max-semi-space-size=8", "--heap-growing-percent=50", "src/cli/main.ts", "serve"]
