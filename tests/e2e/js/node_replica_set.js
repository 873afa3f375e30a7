// The Node.js driver against a one-member ebbdb replica set: `node node_replica_set.js URI
// SCENARIO` runs one scenario and prints what it saw as one line of relaxed Extended JSON, which
// tests/e2e/test_replica_set_js.py compares exactly. NODE_PATH points at .ci/node/node_modules.
'use strict';

const { BSON } = require('mongodb');
const { run } = require('./run');

const [uri, scenario] = process.argv.slice(2);

function failure(e) {
  return { name: e.name, code: e.code, codeName: e.codeName, message: e.message };
}

async function discovery(client) {
  // Connecting with ?replicaSet=rs0 finds the primary through hello's hosts.
  const items = client.db('nodeapp').collection('items');
  await items.insertOne({ _id: 1, name: 'pen' });
  const found = await items.find().toArray();
  const description = client.topology.description;
  const servers = [...description.servers.values()].map((s) => ({ address: s.address, type: s.type }));
  const hello = await client.db('admin').command({ hello: 1 });
  const status = await client.db('admin').command({ replSetGetStatus: 1 });
  const config = await client.db('admin').command({ replSetGetConfig: 1 });
  await client.db('nodeapp').dropDatabase();
  return {
    found,
    topologyType: description.type,
    setName: description.setName,
    servers,
    hello: { setName: hello.setName, hosts: hello.hosts, isWritablePrimary: hello.isWritablePrimary },
    member: { name: status.members[0].name, stateStr: status.members[0].stateStr },
    configHost: config.config.members[0].host,
    hasClusterTime: hello.$clusterTime !== undefined && hello.operationTime !== undefined,
  };
}

async function concerns(client) {
  const items = client.db('nodeapp').collection('items');
  const out = {};
  out.majority = (await items.insertOne({ _id: 1 }, { writeConcern: { w: 'majority', journal: true } }))
    .acknowledged;
  try {
    await items.insertOne({ _id: 2 }, { writeConcern: { w: 2, wtimeoutMS: 100 } });
    out.w2 = null;
  } catch (e) {
    out.w2 = { name: e.name, code: e.code, message: e.message };
  }
  out.count = await items.countDocuments({});
  out.majorityRead = await items.find({}, { readConcern: { level: 'majority' } }).toArray();
  out.linearizable = await items.find({ _id: 1 }, { readConcern: { level: 'linearizable' } }).toArray();
  // A causally consistent session reads its own writes.
  const session = client.startSession({ causalConsistency: true });
  try {
    await items.insertOne({ _id: 3 }, { session });
    out.causal = await items.findOne({ _id: 3 }, { session });
    out.operationTimeIsTimestamp = session.operationTime instanceof BSON.Timestamp;
  } finally {
    await session.endSession();
  }
  try {
    await client.db('admin').command({ replSetInitiate: {} });
  } catch (e) {
    out.initiate = failure(e);
  }
  await client.db('nodeapp').dropDatabase();
  return out;
}

const scenarios = { discovery, concerns };

run(uri, scenarios[scenario]);
