// Resolves "fs" to shim.mjs, except for shim.mjs itself (see register.mjs).
const shim = new URL('./shim.mjs', import.meta.url).href;
export async function resolve(spec, ctx, next) {
  if ((spec === 'fs' || spec === 'node:fs') && ctx.parentURL !== shim) return { url: shim, shortCircuit: true };
  return next(spec, ctx);
}
