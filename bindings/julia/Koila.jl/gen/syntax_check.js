// Parses Julia files with tree-sitter-julia (no Julia needed) and reports every syntax
// error with its line and column; exits 1 when any file has one. ctest julia.syntax runs
// it over the package's hand-written and generated sources.
//
//   node syntax_check.js TOOLS_DIR FILE.jl...
//
// TOOLS_DIR holds node_modules/web-tree-sitter and node_modules/tree-sitter-julia
// (scripts/setup.sh installs them into .tools/julia-syntax).
'use strict';
const fs = require('fs');
const path = require('path');

const [tools, ...files] = process.argv.slice(2);
if (!tools || files.length === 0) {
  console.error('usage: node syntax_check.js TOOLS_DIR FILE.jl...');
  process.exit(2);
}
const Parser = require(path.join(tools, 'node_modules', 'web-tree-sitter'));

// The ERROR and MISSING nodes of a tree, outermost first.
function problems(node, found) {
  if (node.type === 'ERROR' || node.isMissing) {
    found.push(node);
  } else if (node.hasError) {
    for (const child of node.children) problems(child, found);
  }
  return found;
}

(async () => {
  await Parser.init();
  const wasm = path.join(tools, 'node_modules', 'tree-sitter-julia', 'tree-sitter-julia.wasm');
  const parser = new Parser();
  parser.setLanguage(await Parser.Language.load(wasm));
  let bad = 0;
  for (const file of files) {
    const found = problems(parser.parse(fs.readFileSync(file, 'utf8')).rootNode, []);
    for (const n of found) {
      const where = `${file}:${n.startPosition.row + 1}:${n.startPosition.column + 1}`;
      const what = n.isMissing ? `missing ${n.type}` : 'syntax error';
      console.log(`${where}: ${what} near: ${n.text.slice(0, 60).replace(/\n/g, '\\n')}`);
    }
    if (found.length) bad += 1;
  }
  console.log(`${files.length - bad} of ${files.length} files parse`);
  process.exit(bad ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
