// produce.js: kafkajs against Sluice's Kafka listener (SASL PLAIN over
// TLS), run by e2e/kafka_clients_test.go after `npm ci`.
//
// Usage: node produce.js <brokers,comma,separated> <ca-file> <topic> <count> <base-timestamp-ms> <txn-topic>
// The username (the tenant's name) and password (an API key) come from
// SLUICE_KAFKA_USER and SLUICE_KAFKA_PASSWORD; the producer logs in with
// them (SASL PLAIN). With SLUICE_KAFKA_TOKEN (a Sluice JWT) the admin
// client logs in with SASL OAUTHBEARER instead.
//
// It lists the topics (the topic must be there), produces <count> records
// with an idempotent producer (acks all, no compression: kafkajs has no
// lz4 or zstd codec of its own) — record i has key "key-<i%50>", value
// "kafkajs-value-<i>", header i=<i> and timestamp base+i — and sums the
// topic's end offsets (admin.fetchTopicOffsets). Then a consumer group
// (kafkajs's classic protocol, its round-robin assignor) reads the topic
// from the beginning until it has every record, committing as it goes;
// and a transactional producer writes two records to <txn-topic> in a
// transaction that also commits the group's offset of partition 0 of
// <topic> at 1 (sendOffsets), and commits, then one record in a
// transaction that it aborts. It prints one JSON line on stdout:
// {"produced":N,"offsets":[...],"sum":S,"groupRead":R}, and exits non-zero
// when anything fails. kafkajs's own log (debug level) goes to stderr, one
// JSON line each.
'use strict'

const fs = require('fs')
const { Kafka, logLevel, Partitioners } = require('kafkajs')

async function main () {
  const [brokers, caFile, topic, countArg, baseArg, txnTopic] = process.argv.slice(2)
  const count = Number(countArg)
  const base = Number(baseArg)
  if (!brokers || !caFile || !topic || !(count > 0) || !(base > 0) || !txnTopic) {
    throw new Error('usage: node produce.js <brokers> <ca-file> <topic> <count> <base-timestamp-ms> <txn-topic>')
  }
  const client = (sasl) => new Kafka({
    clientId: 'sluice-e2e-kafkajs',
    brokers: brokers.split(','),
    ssl: { ca: [fs.readFileSync(caFile, 'utf-8')] },
    sasl,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    logLevel: logLevel.DEBUG,
    logCreator: () => ({ namespace, level, label, log }) => {
      process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
    }
  })
  const kafka = client({ mechanism: 'plain', username: process.env.SLUICE_KAFKA_USER, password: process.env.SLUICE_KAFKA_PASSWORD })
  const token = process.env.SLUICE_KAFKA_TOKEN
  const adminKafka = token ? client({ mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) }) : kafka

  const admin = adminKafka.admin()
  await admin.connect()
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner
  })
  try {
    const topics = await admin.listTopics()
    if (!topics.includes(topic)) {
      throw new Error(`admin.listTopics: ${JSON.stringify(topics)} lacks ${topic}`)
    }

    await producer.connect()
    const messages = []
    for (let i = 0; i < count; i++) {
      messages.push({
        key: `key-${i % 50}`,
        value: `kafkajs-value-${i}`,
        headers: { i: String(i) },
        timestamp: String(base + i)
      })
    }
    const results = await producer.send({ topic, acks: -1, messages })
    for (const r of results) {
      if (r.errorCode !== 0) {
        throw new Error(`produce: partition ${r.partition} answered error code ${r.errorCode}`)
      }
    }

    const offsets = await admin.fetchTopicOffsets(topic)
    const sum = offsets.reduce((s, o) => s + Number(o.high), 0)
    if (sum !== count) {
      throw new Error(`end offsets sum to ${sum}, want ${count}`)
    }

    // A consumer group reads every record.
    const groupId = `${topic}-g`
    const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const seen = new Set()
    await new Promise((resolve, reject) => {
      consumer.run({
        eachMessage: async ({ message }) => {
          seen.add(message.value.toString())
          if (seen.size >= count) resolve()
        }
      }).catch(reject)
    })
    await consumer.disconnect()

    // Transactions: one committed with the group's offset, one aborted.
    const txp = kafka.producer({ transactionalId: `${topic}-txn`, idempotent: true, maxInFlightRequests: 1 })
    await txp.connect()
    try {
      const committed = await txp.transaction()
      await committed.send({ topic: txnTopic, messages: [{ key: 'a', value: 'committed-1' }, { key: 'b', value: 'committed-2' }] })
      await committed.sendOffsets({ consumerGroupId: `${topic}-txn-g`, topics: [{ topic, partitions: [{ partition: 0, offset: '1' }] }] })
      await committed.commit()
      const aborted = await txp.transaction()
      await aborted.send({ topic: txnTopic, messages: [{ key: 'c', value: 'aborted-1' }] })
      await aborted.abort()
    } finally {
      await txp.disconnect()
    }
    process.stdout.write(JSON.stringify({ produced: count, offsets, sum, groupRead: seen.size }) + '\n')
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }
}

main().catch(err => {
  process.stderr.write(`produce.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
