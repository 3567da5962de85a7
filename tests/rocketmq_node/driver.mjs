// Drives the official RocketMQ Node.js client (rocketmq-client-nodejs, pinned
// in package.json) against a coordinator's gRPC door, for
// tests/acceptance/test_rocketmq_nodejs.py.
//
//   node driver.mjs --endpoint 127.0.0.1:PORT --topic T --group G --scenario S
//
// Scenarios:
//   normal    a normal message: sent, received by a SimpleConsumer, acked
//   commit    a transactional message: begun, sent, committed, received once
//   rollback  a transactional message: begun, sent, rolled back, never received
//   checkback a transactional message left unended: the server's check-back
//             reaches the producer's checker, which commits it; received once
//   sql92     a SimpleConsumer with a SQL92 filter gets only the normal message
//             whose properties match; one with a bad SQL92 expression is refused
//   delay     a delay message due in 2 s, received at its time; another, due in
//             an hour, recalled with its recall handle
//   push      a PushConsumer (on --consumer-endpoint, another node if given)
//             is sent normal messages, a committed, a rolled back and a
//             check-back resolved transactional message, and one whose body
//             starts with "fail-", which its listener fails --fail-times times
//   push-fifo a PushConsumer of a FIFO group (made by the test over HTTP) is
//             sent two message groups of three; the second message of g2
//             always fails, and goes to the dead letters after its attempts
//
// The push scenarios print a `consumed` event for each message the listener
// is given and an `expected` event with the ids it must consume successfully;
// they end once those were consumed, after the quiet window.
//
// The SimpleConsumer starts first: the coordinator delivers only what is
// committed after the subscription exists.
//
// Every step prints one JSON object on a line of stdout ({"event": ...});
// the client's own log goes to stderr. Each step is bounded; any failure
// prints {"event": "error", ...} and exits 1, so the test can say which RPC
// went wrong instead of waiting for a timeout.
//
// The client is loaded from the node_modules next to this file's copy (the
// test installs the package into a temporary directory and copies this file
// there), so nothing is installed into the work tree.

import { format, parseArgs } from 'node:util';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
// CommonJS package: load it with require, whose exports are plain properties.
const {
  ConsumeResult, FilterExpression, Producer, PushConsumer, SimpleConsumer,
} = require('rocketmq-client-nodejs');
const { FilterType, TransactionResolution } = require(
  'rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb.js');

const { values: args } = parseArgs({
  options: {
    endpoint: { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    scenario: { type: 'string' },
    // The push scenarios' consumer connects here (default: --endpoint).
    'consumer-endpoint': { type: 'string' },
    // How many times the push listener fails a "fail-" message (-1: always).
    'fail-times': { type: 'string', default: '1' },
    tag: { type: 'string', default: 'nodejs' },
    // How long to wait for the expected message (or, for rollback, how long
    // to watch for one that must never come).
    'receive-seconds': { type: 'string', default: '30' },
    // After the expected message is acked: how long to go on receiving, to
    // see that it is not delivered a second time.
    'quiet-seconds': { type: 'string', default: '4' },
    // A bound on each client call (start-up, send, end, shutdown).
    'step-seconds': { type: 'string', default: '30' },
  },
  strict: true,
});

for (const name of [ 'endpoint', 'topic', 'group', 'scenario' ]) {
  if (!args[name]) {
    throw new Error(`--${name} is required`);
  }
}
const SCENARIOS = new Set([
  'normal', 'commit', 'rollback', 'checkback', 'sql92', 'delay', 'push', 'push-fifo',
]);
if (!SCENARIOS.has(args.scenario)) {
  throw new Error(`unknown --scenario ${args.scenario}`);
}
const receiveMs = Number(args['receive-seconds']) * 1000;
const quietMs = Number(args['quiet-seconds']) * 1000;
const stepMs = Number(args['step-seconds']) * 1000;
// The long poll of one receive: short, so the loops below check their
// deadlines often; the client's deadline for a receive is this plus the
// request timeout.
const AWAIT_MS = 2000;
// Generous: the machine running the tests may be busy.
const REQUEST_TIMEOUT_MS = 10000;
// Longer than any test's quiet window, so an unacked message would not come
// back within it by the invisible duration alone.
const INVISIBLE_MS = 30000;

function emit(event, fields = {}) {
  if (event === 'consumed' && fields.result === 'success') {
    consumedOk.add(fields.message_id);
  }
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

// The client's log, on stderr with a level and a timestamp; by default it
// would write to ~/logs/rocketmq/.
function line(level, args) {
  process.stderr.write(`${new Date().toISOString()} ${level} ${format(...args)}\n`);
}
const logger = {
  info: (...a) => line('INFO', a),
  warn: (...a) => line('WARN', a),
  error: (...a) => line('ERROR', a),
  debug: (...a) => line('DEBUG', a),
};

class StepError extends Error {
  constructor(step, cause) {
    super(`${step}: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.step = step;
    this.cause = cause;
  }
}

// Runs `promise` as the step `step`, failing if it takes longer than `ms`:
// the client itself waits for some answers (its first Settings reply) forever.
async function step(name, promise, ms = stepMs) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([ promise, timeout ]);
  } catch (err) {
    throw new StepError(name, err);
  } finally {
    clearTimeout(timer);
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

function messageFields(view) {
  return {
    message_id: view.messageId,
    topic: view.topic,
    tag: view.tag ?? null,
    keys: view.keys,
    body: view.body.toString('utf8'),
    properties: Object.fromEntries(view.properties),
    delivery_attempt: view.deliveryAttempt ?? null,
    corrupted: view.corrupted === true,
    has_receipt_handle: Boolean(view.receiptHandle),
    delivery_timestamp: view.deliveryTimestamp ? view.deliveryTimestamp.getTime() : null,
    received_at: Date.now(),
  };
}

// Receives (and acks) until `done()` says so or `ms` has passed; returns the
// ids of the messages received, duplicates included.
async function receiveUntil(consumer, ms, done) {
  const received = [];
  const deadline = Date.now() + ms;
  // At least one receive (one long poll), however short `ms` is.
  do {
    const views = await step('receive', consumer.receive(16, INVISIBLE_MS),
      REQUEST_TIMEOUT_MS + AWAIT_MS + 5000);
    for (const view of views) {
      received.push(view.messageId);
      emit('received', messageFields(view));
      await step('ack', consumer.ack(view));
      emit('acked', { message_id: view.messageId });
    }
  } while (Date.now() < deadline && !done(received));
  return received;
}

// Receives until `messageId` came, then for the quiet window more.
async function receiveOnce(consumer, messageId) {
  const received = await receiveUntil(consumer, receiveMs, got => got.includes(messageId));
  if (!received.includes(messageId)) {
    emit('not_received', { message_id: messageId, waited_ms: receiveMs });
    return;
  }
  await receiveUntil(consumer, quietMs, () => false);
}

const checks = [];
// The checker answers a check-back: the scenario's own outcome; `checkback`
// commits.
const checker = {
  async check(view) {
    checks.push(view.messageId);
    const resolution = args.scenario === 'rollback' ?
      TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    emit('check', {
      message_id: view.messageId,
      resolution: resolution === TransactionResolution.COMMIT ? 'commit' : 'rollback',
    });
    return resolution;
  },
};

function newMessage() {
  return {
    topic: args.topic,
    tag: args.tag,
    keys: [ `key-${args.scenario}` ],
    properties: new Map([ [ 'scenario', args.scenario ] ]),
    body: Buffer.from(`hello from node, ${args.scenario}`),
  };
}

// The SQL92 scenario's filter: only messages with an amount over 100 and
// this run's tag.
const SQL92_FILTER = `amount > 100 AND TAGS = '${args.tag}'`;
const BAD_SQL92_FILTER = "amount > 'x'";

// A consumer with a bad SQL92 expression: refused at start-up or at its
// first receive (ILLEGAL_FILTER_EXPRESSION); either is reported.
async function refusedConsumer(common, clients) {
  const consumer = new SimpleConsumer({
    ...common,
    consumerGroup: `${args.group}-bad`,
    subscriptions: new Map([
      [ args.topic, new FilterExpression(BAD_SQL92_FILTER, FilterType.SQL) ] ]),
    awaitDuration: AWAIT_MS,
  });
  clients.push(consumer);
  try {
    await step('bad consumer startup', consumer.startup());
    await step('bad receive', consumer.receive(1, INVISIBLE_MS), REQUEST_TIMEOUT_MS + AWAIT_MS);
  } catch (err) {
    emit('refused', errorFields(err));
    return;
  }
  emit('not_refused', {});
}

const FAIL = 'fail-';
// The ids the push listener consumed successfully.
const consumedOk = new Set();

// A PushConsumer whose listener reports every message it is given and fails
// the "fail-" ones their first --fail-times times.
async function startPushConsumer(clients, common) {
  const failTimes = Number(args['fail-times']);
  const failures = new Map();
  const consumer = new PushConsumer({
    ...common,
    endpoints: args['consumer-endpoint'] ?? args.endpoint,
    consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, '*' ] ]),
    messageListener: {
      async consume(view) {
        const began = Date.now();
        const body = view.body.toString('utf8');
        const failed = failures.get(view.messageId) ?? 0;
        const fail = body.startsWith(FAIL) && (failTimes < 0 || failed < failTimes);
        if (fail) {
          failures.set(view.messageId, failed + 1);
        }
        await sleep(50);
        emit('consumed', {
          ...messageFields(view),
          message_group: view.messageGroup ?? null,
          result: fail ? 'failure' : 'success',
          began: began / 1000,
          ended: Date.now() / 1000,
        });
        return fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    },
  });
  clients.push(consumer);
  await step('push consumer startup', consumer.startup());
  emit('consumer_started', { client_id: consumer.clientId });
}

// Until every id of `expected` was consumed successfully (or receive-seconds
// passed), then the quiet window.
async function awaitConsumed(expected) {
  emit('expected', { message_ids: expected });
  const deadline = Date.now() + receiveMs;
  while (!expected.every(id => consumedOk.has(id)) && Date.now() < deadline) {
    await sleep(100);
  }
  await sleep(quietMs);
}

async function runPush(clients, common, producer) {
  const ids = [];
  for (let n = 0; n < 2; n++) {
    const receipt = await step('send', producer.send({ ...newMessage(), body: Buffer.from(`normal ${n}`) }));
    ids.push(receipt.messageId);
  }
  const committed = producer.beginTransaction();
  const c = await step('send', producer.send({ ...newMessage(), body: Buffer.from('committed') }, committed));
  await step('commit', committed.commit());
  ids.push(c.messageId);
  const rolledBack = producer.beginTransaction();
  const r = await step('send', producer.send({ ...newMessage(), body: Buffer.from('rolled back') }, rolledBack));
  await step('rollback', rolledBack.rollback());
  emit('rolled_back', { message_id: r.messageId });
  // Left open: the server's check-back asks the checker, which commits.
  const open = producer.beginTransaction();
  const o = await step('send', producer.send({ ...newMessage(), body: Buffer.from('checked') }, open));
  ids.push(o.messageId);
  const failing = await step('send', producer.send({ ...newMessage(), body: Buffer.from(`${FAIL}once`) }));
  ids.push(failing.messageId);
  await awaitConsumed(ids);
}

async function runPushFifo(producer) {
  const ids = [];
  for (let n = 0; n < 3; n++) {
    for (const group of [ 'g1', 'g2' ]) {
      const body = group === 'g2' && n === 1 ? `${FAIL}${group}` : `${group} ${n}`;
      const receipt = await step('send', producer.send({
        topic: args.topic, tag: args.tag, messageGroup: group, body: Buffer.from(body),
      }));
      emit('sent', { message_id: receipt.messageId, message_group: group, body });
      if (!body.startsWith(FAIL)) {
        ids.push(receipt.messageId);
      }
    }
  }
  await awaitConsumed(ids);
}

async function run(clients) {
  const common = {
    endpoints: args.endpoint,
    namespace: '',
    requestTimeout: REQUEST_TIMEOUT_MS,
    logger,
  };
  if (args.scenario.startsWith('push')) {
    await startPushConsumer(clients, common);
    const producer = new Producer({ ...common, topics: [ args.topic ], checker });
    clients.push(producer);
    await step('producer startup', producer.startup());
    emit('producer_started', { client_id: producer.clientId });
    if (args.scenario === 'push') {
      await runPush(clients, common, producer);
    } else {
      await runPushFifo(producer);
    }
    return;
  }
  const sql92 = args.scenario === 'sql92';
  const consumer = new SimpleConsumer({
    ...common,
    consumerGroup: args.group,
    subscriptions: new Map([
      [ args.topic, sql92 ? new FilterExpression(SQL92_FILTER, FilterType.SQL) : '*' ] ]),
    awaitDuration: AWAIT_MS,
  });
  clients.push(consumer);
  await step('consumer startup', consumer.startup());
  emit('consumer_started', { client_id: consumer.clientId });

  const producer = new Producer({ ...common, topics: [ args.topic ], checker });
  clients.push(producer);
  await step('producer startup', producer.startup());
  emit('producer_started', { client_id: producer.clientId });

  const message = newMessage();
  if (sql92) {
    await refusedConsumer(common, clients);
    // Sent in this order: the consumer has nothing to receive before `big`.
    for (const [ name, amount ] of [ [ 'small', '5' ], [ 'big', '150' ] ]) {
      message.properties = new Map([ [ 'amount', amount ] ]);
      const receipt = await step('send', producer.send(message));
      emit('sent', { name, message_id: receipt.messageId });
      if (name === 'big') {
        await receiveOnce(consumer, receipt.messageId);
      }
    }
    return;
  }
  if (args.scenario === 'delay') {
    const due = new Date(Date.now() + 2000);
    const receipt = await step('send', producer.send({ ...message, deliveryTimestamp: due }));
    emit('sent', {
      message_id: receipt.messageId,
      delivery_timestamp: due.getTime(),
      has_recall_handle: Boolean(receipt.recallHandle),
    });
    const later = await step('send', producer.send({
      ...newMessage(), deliveryTimestamp: new Date(Date.now() + 3600000),
    }));
    const recalled = await step('recall', producer.recallMessage(args.topic, later.recallHandle));
    emit('recalled', { message_id: later.messageId, answer: recalled.messageId ?? null });
    await receiveOnce(consumer, receipt.messageId);
    return;
  }
  if (args.scenario === 'normal') {
    const receipt = await step('send', producer.send(message));
    emit('sent', { message_id: receipt.messageId, offset: receipt.offset });
    await receiveOnce(consumer, receipt.messageId);
    return;
  }

  const transaction = producer.beginTransaction();
  const receipt = await step('send', producer.send(message, transaction));
  emit('sent', {
    message_id: receipt.messageId,
    transaction_id: receipt.transactionId,
    offset: receipt.offset,
  });
  if (args.scenario !== 'checkback') {
    // A half message reaches no consumer: one long poll sees nothing. (Not
    // for checkback, whose check-back may commit it during that poll.)
    const early = await receiveUntil(consumer, 1, () => false);
    emit('before_end', { received: early.length });
  }

  if (args.scenario === 'commit') {
    await step('commit', transaction.commit());
    emit('committed', { message_id: receipt.messageId });
    await receiveOnce(consumer, receipt.messageId);
  } else if (args.scenario === 'rollback') {
    await step('rollback', transaction.rollback());
    emit('rolled_back', { message_id: receipt.messageId });
    await receiveUntil(consumer, receiveMs, () => false);
  } else {
    // checkback: no end from the producer; the server must ask the checker.
    await receiveOnce(consumer, receipt.messageId);
  }
}

async function shutdown(clients) {
  // Producer first: its NotifyClientTermination is the one a server routes
  // check-backs by.
  for (const client of clients.reverse()) {
    try {
      await step('shutdown', client.shutdown(), 15000);
    } catch (err) {
      emit('shutdown_error', { client_id: client.clientId, error: String(err) });
    }
  }
}

function causeChain(err) {
  const chain = [];
  for (let cause = err?.cause; cause && chain.length < 5; cause = cause.cause) {
    chain.push(String(cause?.message ?? cause));
  }
  return chain;
}

function errorFields(err) {
  const cause = err instanceof StepError ? err.cause : err;
  return {
    step: err instanceof StepError ? err.step : null,
    error: String(err?.message ?? err),
    name: cause?.name ?? null,
    // ClientException: a RocketMQ status code; gRPC errors: a gRPC status code.
    code: cause?.code ?? null,
    details: cause?.details ?? null,
    // The client wraps what went wrong (a gRPC error, a status) in causes.
    causes: causeChain(cause),
  };
}

const clients = [];
let exitCode = 0;
try {
  await run(clients);
} catch (err) {
  emit('error', errorFields(err));
  logger.error('driver failed: %s', err?.stack ?? err);
  exitCode = 1;
}
await shutdown(clients);
emit('done', { checks: checks.length, exit: exitCode });
// gRPC channels and the client's timers would keep the process alive.
process.exit(exitCode);
