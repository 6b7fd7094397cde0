// Lists the wire interfaces of src/types.ts and their fields into dist/fields.json:
// {"EnvelopeJson": {"state": null, "message": "MessageRefJson", ...}, ...}. A field's value names
// the interface it holds (directly, nullable or as an array), or null for a plain value. A test
// holds this list against the server's /openapi.json, so the types cannot drift from the server.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const source = fileURLToPath(new URL("../src/types.ts", import.meta.url));
const target = fileURLToPath(new URL("../dist/fields.json", import.meta.url));
const program = ts.createProgram([source], { strict: true, target: ts.ScriptTarget.ES2022 });
const checker = program.getTypeChecker();
const file = program.getSourceFile(source);
const interfaces = new Set();
ts.forEachChild(file, (node) => {
  if (ts.isInterfaceDeclaration(node)) interfaces.add(node.name.text);
});

function nested(type) {
  const parts = type.isUnion() ? type.types : [type];
  for (const part of parts) {
    const element = checker.isArrayType(part) ? checker.getTypeArguments(part)[0] : part;
    const name = element?.getSymbol()?.getName();
    if (name && interfaces.has(name)) return name;
  }
  return null;
}

const fields = {};
ts.forEachChild(file, (node) => {
  if (!ts.isInterfaceDeclaration(node)) return;
  const type = checker.getTypeAtLocation(node);
  const props = {};
  for (const property of checker.getPropertiesOfType(type)) {
    props[property.getName()] = nested(checker.getTypeOfSymbolAtLocation(property, node));
  }
  fields[node.name.text] = props;
});
writeFileSync(target, JSON.stringify(fields, null, 2) + "\n");
console.log(`fields: ${Object.keys(fields).length} interfaces -> dist/fields.json`);
