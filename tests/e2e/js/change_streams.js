// Change streams through the Node.js driver (npm `mongodb`, pinned in .ci/node) against ebbdb as a
// one-member replica set: `node change_streams.js URI` prints what it saw as one line of relaxed
// Extended JSON, which tests/e2e/test_change_streams_node.py compares. NODE_PATH points at
// .ci/node/node_modules.
'use strict';

const { run } = require('./run');

const [uri] = process.argv.slice(2);

function plain(event) {
  const { _id, clusterTime, wallTime, ...rest } = event;
  return rest;
}

run(uri, async (client) => {
  const out = {};
  const db = client.db('nodestreams');
  await db.dropDatabase();
  const coll = db.collection('c');
  await coll.insertOne({ _id: 0 });
  const stream = coll.watch([{ $match: { operationType: { $ne: 'delete' } } }], {
    fullDocument: 'updateLookup',
    maxAwaitTimeMS: 200,
  });
  // The driver's first aggregate runs on the first hasNext/next.
  const first = stream.tryNext();
  await first;
  await coll.insertOne({ _id: 1, a: 1 });
  await coll.updateOne({ _id: 1 }, { $set: { a: 2 } });
  await coll.deleteOne({ _id: 0 });
  await coll.insertOne({ _id: 2 });
  const events = [];
  for (let i = 0; i < 3; i++) events.push(await stream.next());
  out.events = events.map(plain);
  const token = stream.resumeToken;
  out.tokenIsHex = /^82[0-9A-F]+$/.test(token._data);
  await stream.close();
  // Resuming after the first event gives the two after it.
  const resumed = coll.watch([], { resumeAfter: events[0]._id });
  out.resumed = [];
  for (let i = 0; i < 2; i++) out.resumed.push((await resumed.next()).operationType);
  await resumed.close();
  // A stream's 'change' events, then the drop and invalidate that close it.
  const listened = coll.watch();
  const seen = [];
  const closed = new Promise((resolve) => listened.on('close', resolve));
  listened.on('change', (change) => seen.push(change.operationType));
  await new Promise((r) => setTimeout(r, 300));
  await coll.insertOne({ _id: 3 });
  await coll.drop();
  await closed;
  out.listened = seen;
  // A bad token is refused with mongod's code.
  try {
    await coll.watch([], { resumeAfter: { _data: 'zz' } }).next();
    out.badToken = 'accepted';
  } catch (err) {
    out.badToken = err.code;
  }
  return out;
});
