// Compiles filters/<name>.ts to OUT_DIR/<name>.wasm for each name given, in one
// node process (binaryen.js loads once). Usage: node compile.js OUT_DIR name...
"use strict";
const path = require("path");
const asc = require(path.join(__dirname, "node_modules/assemblyscript/cli/asc"));

const [out, ...names] = process.argv.slice(2);
(async () => {
  await asc.ready;
  for (const name of names) {
    const stderr = asc.createMemoryStream();
    const args = [
      path.join("filters", name + ".ts"),
      "--binaryFile", path.join(out, name + ".wasm"),
      // Required by the SDK: route abort() to its abort_proc_exit (log at
      // critical, then wasi_unstable.proc_exit(255)) instead of env.abort.
      "--use", "abort=abort_proc_exit",
      "--optimize",
    ];
    const err = await new Promise(res => asc.main(args, { stdout: process.stdout, stderr }, res));
    if (err) {
      // asc also prints one harmless AS201 warning from its std lib; all of
      // its output is shown only when a compile fails.
      process.stderr.write(stderr.toString());
      throw new Error(`asc failed for ${name}: ${err.message || err}`);
    }
  }
})().catch(e => { console.error(e.message); process.exit(1); });
