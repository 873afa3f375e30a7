// What the Node.js driver scripts here share: `run(uri, work, options)` connects a MongoClient to
// `uri` (serverSelectionTimeoutMS 5000, plus `options`), prints what `await work(client)` returns
// as one line of relaxed Extended JSON (tests/e2e/node_tools.py:run_js reads it), closes the
// client, and exits 1 with the error on stderr when anything throws.
'use strict';

const { MongoClient, BSON } = require('mongodb');

async function main(uri, work, options) {
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 5000, ...options });
  try {
    const out = await work(client);
    console.log(BSON.EJSON.stringify(out));
  } finally {
    await client.close();
  }
}

function run(uri, work, options = {}) {
  main(uri, work, options).catch((e) => {
    console.error(e);
    process.exit(1);
  });
}

module.exports = { run };
