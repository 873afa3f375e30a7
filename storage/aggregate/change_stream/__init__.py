"""Change streams' pure side: resume tokens (`tokens`), the `$changeStream` stage's options
(`spec`), and oplog entries turned into MongoDB 7.0's change events (`events`). The server reads
the oplog, waits for it, looks documents up and runs the stages after `$changeStream`."""
