// Retryable writes through the Node.js driver (npm `mongodb`, pinned in .ci/node) against an ebbdb
// replica set: `node retryable_writes.js URI` makes each kind of write meet the failCommand fail
// point once (the connection closed, a RetryableWriteError, a write concern error after the
// write), lets the driver retry, and prints what it saw and what the collection holds as one line
// of relaxed Extended JSON for tests/e2e/test_retryable_writes.py. NODE_PATH points at
// .ci/node/node_modules.
'use strict';

const { run } = require('./run');

const [uri] = process.argv.slice(2);

const FAILURES = {
  closeConnection: { closeConnection: true },
  errorLabels: { errorCode: 91, errorLabels: ['RetryableWriteError'] },
  writeConcernError: {
    writeConcernError: { code: 91, errmsg: 'Replication is being shut down' },
    errorLabels: ['RetryableWriteError'],
  },
};

async function failOnce(client, command, data) {
  await client.db('admin').command({
    configureFailPoint: 'failCommand',
    mode: { times: 1 },
    data: { failCommands: [command], ...data },
  });
}

async function round(client, name, data) {
  const items = client.db('node').collection(name);
  await items.insertOne({ _id: 0, x: 0 });
  const out = {};
  await failOnce(client, 'insert', data);
  out.insertOne = (await items.insertOne({ _id: 1, x: 0 })).insertedId;
  await failOnce(client, 'insert', data);
  out.insertMany = (await items.insertMany([{ _id: 2 }, { _id: 3 }])).insertedCount;
  await failOnce(client, 'update', data);
  out.updateOne = (await items.updateOne({ _id: 0 }, { $inc: { x: 1 } })).modifiedCount;
  await failOnce(client, 'update', data);
  out.upsert = (await items.updateOne({ _id: 9 }, { $inc: { x: 1 } }, { upsert: true })).upsertedId;
  await failOnce(client, 'findAndModify', data);
  out.findOneAndUpdate = await items.findOneAndUpdate(
    { _id: 0 },
    { $inc: { x: 10 } },
    { returnDocument: 'after' },
  );
  await failOnce(client, 'delete', data);
  out.deleteOne = (await items.deleteOne({ _id: 3 })).deletedCount;
  await failOnce(client, 'find', { closeConnection: true });
  out.left = await items.find().sort({ _id: 1 }).toArray();
  return out;
}

run(uri, async (client) => {
  const out = {};
  for (const [name, data] of Object.entries(FAILURES)) {
    out[name] = await round(client, name, data);
  }
  return out;
});
