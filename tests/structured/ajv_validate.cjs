// Oracle for tests/structured: reads {"schema": ..., "texts": [...]} from the file named by
// the last argument and prints, for each text, "" when JSON.parse reads it and ajv finds it
// valid under the schema (formats included, by ajv-formats), else the reason.
const fs = require("fs");
const Ajv = require("ajv");
const input = JSON.parse(fs.readFileSync(process.argv[process.argv.length - 1], "utf8"));
const ajv = new Ajv({ strict: false, allErrors: true });
require("ajv-formats")(ajv);  // "full" mode: dates and times checked by value, not only shape
const validate = ajv.compile(input.schema);
const out = input.texts.map((text) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return `not JSON: ${e.message}: ${text}`;
  }
  return validate(value) ? "" : `${ajv.errorsText(validate.errors)}: ${text}`;
});
console.log(JSON.stringify(out));
