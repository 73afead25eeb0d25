// Loaded with node --import on Node before 22, whose fs has no globSync:
// the MCP conformance suite imports it (for files of baselines the client
// scenarios do not read). hooks.mjs resolves "fs" to shim.mjs, which adds it.
import { register } from 'node:module';
register('./hooks.mjs', import.meta.url);
