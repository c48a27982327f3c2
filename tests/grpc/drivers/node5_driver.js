// Runs steps with the official RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs):
// node node5_driver.js ENDPOINT STEPS_JSON — the same steps and RESULT/ERROR lines as
// py5_driver.py (send, receive, ack, change_invisible), and push: a PushConsumer that counts
// each delivery until `want` distinct messages arrived, then listens `settle_s` more for copies.
'use strict';
const { format } = require('util');
const { ConsumeResult, Producer, PushConsumer, SimpleConsumer } = require('rocketmq-client-nodejs');

// warnings and errors go to stderr, so a run that fails shows the client's own account
const stamp = () => new Date().toISOString();
const quiet = {
  info() {}, debug() {},
  warn(...a) { console.error(`${stamp()} WARN ${format(...a)}`); },
  error(...a) { console.error(`${stamp()} ERROR ${format(...a)}`); },
};
// The client waits for the endpoint's first settings answer with no time limit of its own, so
// each client's start-up gets a bound of its own (a failed start-up names itself at once), and a
// watchdog over the whole run names the step and phase it is in, so any other hang fails with a
// reason instead of a kill.
let phase = 'starting';
const watchdogMs = Number(process.env.MQCORE_NODE_DRIVER_WATCHDOG_MS || 100000);
const startupMs = Number(process.env.MQCORE_NODE_DRIVER_STARTUP_MS || 30000);
setTimeout(() => {
  console.log('ERROR ' + JSON.stringify({ type: 'Watchdog', error: `still in ${phase} after ${watchdogMs} ms` }));
  process.exit(3);
}, watchdogMs).unref();

class StartupTimeout extends Error {
  constructor(what, ms) {
    super(`${what} did not finish within ${ms} ms (the client was still waiting for its route `
      + 'or for the endpoint\'s first settings answer on the telemetry stream)');
    this.name = 'StartupTimeout';
  }
}

// client.startup(), failing with StartupTimeout after startupMs
async function startBounded(client, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new StartupTimeout(what, startupMs)), startupMs);
  });
  try {
    await Promise.race([client.startup(), expired]);
  } finally {
    clearTimeout(timer);
  }
}

async function main() {
  const endpoints = process.argv[2];
  const steps = JSON.parse(process.argv[3]);
  let producer = null;
  const consumers = new Map();
  const seen = new Map();
  try {
    for (const [index, step] of steps.entries()) {
      let out;
      phase = `step ${index} (${step.op})`;
      if (step.op === 'send') {
        if (!producer) {
          producer = new Producer({ endpoints, namespace: '', topics: [step.topic], logger: quiet });
          phase += ': producer startup';
          await startBounded(producer, `step ${index}: the producer's start-up`);
        }
        const msg = { topic: step.topic, body: Buffer.from(step.body) };
        if (step.tag) msg.tag = step.tag;
        if (step.keys) msg.keys = step.keys;
        if (step.props) msg.properties = new Map(Object.entries(step.props));
        if (step.group) msg.messageGroup = step.group;
        if (step.delay_s) msg.deliveryTimestamp = new Date(Date.now() + step.delay_s * 1000);
        const receipt = await producer.send(msg);
        out = { message_id: receipt.messageId };
      } else if (step.op === 'receive') {
        const key = `${step.group}\u0001${step.topic}`;
        let c = consumers.get(key);
        if (!c) {
          c = new SimpleConsumer({ endpoints, namespace: '', consumerGroup: step.group, logger: quiet,
            subscriptions: new Map().set(step.topic, step.tag || '*'), awaitDuration: (step.await_s || 3) * 1000 });
          phase += ': consumer startup';
          consumers.set(key, c);  // shut down in finally even when its start-up fails
          await startBounded(c, `step ${index}: the consumer's start-up (group ${step.group})`);
        }
        const got = [];
        const deadline = Date.now() + (step.timeout_s || 20) * 1000;
        while (got.length < step.want && Date.now() < deadline) {
          const messages = await c.receive(Math.min(32, step.want - got.length), step.invisible_s * 1000);
          for (const m of messages) {
            seen.set(m.messageId, [ c, m ]);
            got.push({ id: m.messageId, body: m.body.toString(), tag: m.tag ?? null, keys: [ ...m.keys ].sort(),
              props: Object.fromEntries(m.properties), attempt: m.deliveryAttempt, group: m.messageGroup ?? null,
              delivery_ts: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : 0, topic: m.topic,
              corrupted: m.corrupted, received_ms: Date.now() });
            if (step.ack) await c.ack(m);
          }
        }
        out = { messages: got };
      } else if (step.op === 'push') {
        const deliveries = [];
        const ids = new Set();
        let arrived;
        const all = new Promise((resolve) => { arrived = resolve; });
        const c = new PushConsumer({ endpoints, namespace: '', consumerGroup: step.group, logger: quiet,
          subscriptions: new Map().set(step.topic, step.tag || '*'),
          messageListener: { consume(m) {
            deliveries.push({ id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt });
            ids.add(m.messageId);
            if (ids.size >= step.want) arrived();
            return ConsumeResult.SUCCESS;
          } } });
        phase += ': push consumer';
        consumers.set(`push\u0001${index}`, c);
        await startBounded(c, `step ${index}: the push consumer's start-up (group ${step.group})`);
        let timer;
        await Promise.race([all, new Promise((resolve) => { timer = setTimeout(resolve, (step.timeout_s || 30) * 1000); })]);
        clearTimeout(timer);
        // copies of an acked message would come now: listen a little longer before counting
        await new Promise((resolve) => setTimeout(resolve, (step.settle_s || 0) * 1000));
        out = { deliveries };
      } else if (step.op === 'ack') {
        for (const id of step.ids) {
          const [ c, m ] = seen.get(id);
          await c.ack(m);
        }
        out = { acked: step.ids.length };
      } else if (step.op === 'change_invisible') {
        const [ c, m ] = seen.get(step.id);
        await c.changeInvisibleDuration(m, step.invisible_s * 1000);
        out = { changed: step.id };
      } else {
        throw new Error(`unknown step ${step.op}`);
      }
      console.log('RESULT ' + JSON.stringify(out));
    }
  } catch (e) {
    console.log('ERROR ' + JSON.stringify({ type: e.name, error: String(e && e.stack || e) }));
    process.exitCode = 1;
  } finally {
    if (producer) await producer.shutdown().catch(() => {});
    for (const c of consumers.values()) await c.shutdown().catch(() => {});
  }
}

main().then(() => process.exit(process.exitCode || 0));
