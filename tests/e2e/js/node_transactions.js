// The Node.js driver's transactions against an ebbdb replica set: `node node_transactions.js URI`
// runs session.withTransaction (a transfer, then a callback that throws and so aborts) and prints
// what it saw as one line of relaxed Extended JSON (tests/e2e/test_transactions_clients.py).
'use strict';

const { run } = require('./run');

run(process.argv[2], async (client) => {
  const accounts = client.db('bank').collection('accounts');
  await accounts.deleteMany({});
  await accounts.insertMany([{ _id: 'a', balance: 100 }, { _id: 'b', balance: 0 }]);
  const out = {};
  const session = client.startSession();
  try {
    out.result = await session.withTransaction(async () => {
      await accounts.updateOne({ _id: 'a' }, { $inc: { balance: -40 } }, { session });
      await accounts.updateOne({ _id: 'b' }, { $inc: { balance: 40 } }, { session });
      out.inside = await accounts.find({}, { session }).sort({ _id: 1 }).toArray();
      out.outside = await accounts.find({}).sort({ _id: 1 }).toArray();
      return 'moved';
    });
    try {
      await session.withTransaction(async () => {
        await accounts.insertOne({ _id: 'c', balance: 1 }, { session });
        throw new Error('changed my mind');
      });
    } catch (err) {
      out.thrown = err.message;
    }
  } finally {
    await session.endSession();
  }
  out.after = await accounts.find({}).sort({ _id: 1 }).toArray();
  return out;
});
