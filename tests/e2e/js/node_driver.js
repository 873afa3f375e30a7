// The Node.js driver (npm `mongodb`, pinned in .ci/node) against ebbdb: `node node_driver.js URI
// SCENARIO` runs one scenario and prints what it saw as one line of relaxed Extended JSON, which
// tests/e2e/test_node_driver.py compares exactly. NODE_PATH points at .ci/node/node_modules.
'use strict';

const { BSON } = require('mongodb');
const { run } = require('./run');

const [uri, scenario] = process.argv.slice(2);

async function crud(client) {
  const items = client.db('shelf').collection('items');
  const out = {};
  out.insertOne = await items.insertOne({ _id: 1, name: 'pen', qty: 5, tags: ['blue'] });
  out.insertMany = await items.insertMany([
    { _id: 2, name: 'ink', qty: 10 },
    { _id: 3, name: 'pad', qty: 0 },
  ]);
  out.findSorted = await items.find({}, { sort: { qty: -1 }, projection: { name: 1, qty: 1 } }).toArray();
  out.findOne = await items.findOne({ name: 'pen' });
  out.updateOne = await items.updateOne({ _id: 1 }, { $inc: { qty: 2 }, $push: { tags: 'red' } });
  out.updateMany = await items.updateMany({ qty: { $gt: 0 } }, { $set: { stocked: true } });
  out.upsert = await items.updateOne({ _id: 4 }, { $set: { name: 'clip' } }, { upsert: true });
  out.replaceOne = await items.replaceOne({ _id: 3 }, { name: 'pad', qty: 7 });
  out.findOneAndUpdate = await items.findOneAndUpdate(
    { _id: 2 },
    { $inc: { qty: -1 } },
    { returnDocument: 'after' },
  );
  out.countDocuments = await items.countDocuments({ stocked: true });
  out.distinct = await items.distinct('name', { qty: { $gte: 7 } });
  out.deleteOne = await items.deleteOne({ _id: 4 });
  out.deleteMany = await items.deleteMany({ qty: { $lt: 8 } });
  out.left = await items.find().sort({ _id: 1 }).toArray();
  out.aggregate = await items
    .aggregate([{ $group: { _id: null, total: { $sum: '$qty' }, n: { $sum: 1 } } }, { $project: { _id: 0 } }])
    .toArray();
  return out;
}

async function batches(client) {
  const events = client.db('shelf').collection('events');
  await events.insertMany(Array.from({ length: 25 }, (_, i) => ({ _id: i, even: i % 2 === 0 })));
  const commands = [];
  client.on('commandStarted', (e) => {
    if (e.commandName === 'find' || e.commandName === 'getMore' || e.commandName === 'aggregate') {
      commands.push(e.commandName);
    }
  });
  const ids = [];
  for await (const doc of events.find({}, { batchSize: 4, sort: { _id: 1 } })) {
    ids.push(doc._id);
  }
  const evens = [];
  const cursor = events.aggregate([{ $match: { even: true } }, { $sort: { _id: -1 } }], { batchSize: 5 });
  for await (const doc of cursor) {
    evens.push(doc._id);
  }
  return { ids, evens, commands };
}

async function ttl(client) {
  const db = client.db('shelf');
  const sessions = db.collection('sessions');
  const out = {};
  out.createIndex = await sessions.createIndex({ t: 1 }, { expireAfterSeconds: 60 });
  out.indexes = await sessions.indexes();
  const now = new Date();
  await sessions.insertMany([
    { _id: 'old', t: new Date(now.getTime() - 120 * 1000) },
    { _id: 'new', t: now },
    { _id: 'none' },
  ]);
  const ids = async () => (await sessions.find({}, { sort: { _id: 1 } }).toArray()).map((d) => d._id);
  // An expired document is hidden at once; a pass deletes it.
  out.visible = await ids();
  const admin = client.db('admin');
  await admin.command({ ttlClock: 1, advanceMillis: 61 * 1000 });
  out.visibleLater = await ids();
  const pass = await admin.command({ ttlMonitorPass: 1 });
  out.pass = { deleted: pass.deleted, collections: pass.collections };
  // Back to real time: 'new' is no longer expired, so only a deletion keeps it away.
  await admin.command({ ttlClock: 1, reset: true });
  out.afterPass = await ids();
  return out;
}

function serverError(e) {
  return { name: e.name, code: e.code, message: e.message, keyPattern: e.keyPattern, keyValue: e.keyValue };
}

async function duplicate(client) {
  const users = client.db('shelf').collection('users');
  await users.createIndex({ email: 1 }, { unique: true });
  await users.insertOne({ _id: 1, email: 'a@example.com' });
  const out = {};
  try {
    await users.insertOne({ _id: 1, email: 'b@example.com' });
    out.sameId = 'no error';
  } catch (e) {
    out.sameId = serverError(e);
  }
  try {
    await users.insertOne({ _id: 2, email: 'a@example.com' });
    out.sameEmail = 'no error';
  } catch (e) {
    out.sameEmail = serverError(e);
  }
  try {
    await users.insertMany([{ _id: 3, email: 'c@example.com' }, { _id: 1 }, { _id: 4 }]);
    out.many = 'no error';
  } catch (e) {
    out.many = {
      name: e.name,
      code: e.code,
      insertedCount: e.result.insertedCount,
      writeErrors: e.writeErrors.map((w) => ({ index: w.index, code: w.code, errmsg: w.errmsg })),
    };
  }
  out.left = (await users.find({}, { sort: { _id: 1 } }).toArray()).map((d) => d._id);
  return out;
}

async function dbstats(client) {
  const db = client.db('shelf');
  // Two documents of one size: their average is exact however a server divides.
  const docs = [
    { _id: 1, name: 'pen', qty: 5 },
    { _id: 2, name: 'ink', qty: 6 },
  ];
  await db.collection('items').insertMany(docs);
  await db.collection('items').createIndex({ name: 1 });
  await db.createCollection('empty');
  const stats = await db.stats();
  const dataSize = docs.reduce((sum, d) => sum + BSON.calculateObjectSize(d), 0);
  return { stats, dataSize };
}

async function transaction(client) {
  // A standalone server has no transactions: withTransaction's first write must be refused, and
  // nothing written.
  const orders = client.db('shop').collection('orders');
  const session = client.startSession();
  let error = null;
  try {
    await session.withTransaction(async () => {
      await orders.insertOne({ _id: 1, item: 'tea' }, { session });
    });
  } catch (e) {
    error = { code: e.code, codeName: e.codeName, message: e.message };
  } finally {
    await session.endSession();
  }
  return { error, count: await orders.countDocuments({}) };
}

async function login(client) {
  // The URI carries the credentials: the driver logs in on connect (SCRAM, speculatively in its
  // hello), then writes, reads and asks who it is.
  const items = client.db('vault').collection('items');
  await items.insertOne({ _id: 1, secret: 'kept' });
  const status = await client.db('admin').command({ connectionStatus: 1 });
  return { found: await items.find().toArray(), authInfo: status.authInfo };
}

async function refused(client) {
  // Without credentials (or with wrong ones) the first read fails: report how.
  try {
    await client.db('vault').collection('items').findOne({});
    return { error: null };
  } catch (e) {
    return { error: { name: e.name, code: e.code, codeName: e.codeName, message: e.message } };
  }
}

const scenarios = { crud, batches, ttl, duplicate, dbstats, transaction, login, refused };

run(uri, scenarios[scenario], { monitorCommands: true });
