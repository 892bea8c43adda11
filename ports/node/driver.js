// driver.js — the Node port's driver for `emq check --driver "node ports/node/driver.js"`
// (specs/driver-protocol.md): JSON lines in on stdin, one reply per line out on stdout.
//
//   node driver.js [--scripts DIR]    DIR: what `emq scripts --out DIR` wrote (default ./lua)
//
// Each op maps the wire's arguments onto the client's API (emq.js) and its answer back;
// bytes travel as {"b64": ...}. Refusals become error replies with their code.

import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { connect, EmqError, NoScript } from './emq.js';

const here = dirname(fileURLToPath(import.meta.url));
const flag = process.argv.indexOf('--scripts');
const scripts = flag > 0 ? process.argv[flag + 1] : join(here, 'lua');
const { version } = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));

const isBytes = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).join() === 'b64';
const b64 = (buf) => ({ b64: buf.toString('base64') });
// Arguments: {"b64": ...} becomes a Buffer, everything else stays as sent (hostile values too).
const decode = (v) => (isBytes(v) ? Buffer.from(v.b64, 'base64')
  : v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, decode(x)]))
    : v);

let conn = null;
let protocol = 1;
let runQueues = [];
const PROTOCOL = 2; // the newest version this driver speaks; it answers min(kit's, this)
const BATCH_MAX = 256;

const QUEUE_OPS = {
  enqueue: (q, a) => q.enqueue(a.id, a.payload),
  schedule: (q, a) => q.schedule(a.id, a.payload, { runAt: a.run_at, delayMs: a.delay_ms, now: a.now }),
  claim: async (q, a) => {
    const job = await q.claim(a.lease_ms, { now: a.now });
    return { job: job && { id: job.id, payload: b64(job.payload), token: job.token }, dropped: q.lastDropped };
  },
  complete: (q, a) => q.complete(a.id, a.token),
  retry: (q, a) => q.retry(a.id, a.token, { delayMs: a.delay_ms, maxAttempts: a.max_attempts, error: a.error, now: a.now }),
  extend: (q, a) => q.extend(a.id, a.token, a.lease_ms, { now: a.now }),
  promote: (q, a) => q.promote({ limit: a.limit, now: a.now }),
  reap: (q, a) => q.reap({ limit: a.limit, maxAttempts: a.max_attempts, now: a.now }),
  reprocess: (q, a) => q.reprocess(a.id),
  remove: (q, a) => q.remove(a.id),
  browse: (q, a) => q.browse(a.n),
  counts: (q) => q.counts(),
  state: (q, a) => q.state(a.id),
  lane_enqueue: (q, a) => q.laneEnqueue(a.id, a.payload, a.group),
  lane_claim: async (q, a) => {
    const job = await q.laneClaim(a.lease_ms, { now: a.now });
    return { job: job && { ...job, payload: b64(job.payload) }, dropped: q.lastDropped };
  },
  lane_wclaim: async (q, a) => {
    const jobs = await q.laneWclaim(a.lease_ms, { now: a.now });
    return { jobs: jobs.map((job) => ({ ...job, payload: b64(job.payload) })), dropped: q.lastDropped };
  },
  lane_pause: (q, a) => q.lanePause(a.group),
  lane_resume: (q, a) => q.laneResume(a.group),
  lane_limit: (q, a) => q.laneLimit(a.group, a.n),
  lane_weight: (q, a) => q.laneWeight(a.group, a.w),
  job: async (q, a) => {
    const row = await q.job(a.id);
    return row && Object.fromEntries(Object.entries(row).map(([field, value]) => [field, b64(value)]));
  },
};

const CONTROL_OPS = {
  init: async (a) => {
    if (!Number.isInteger(a.protocol) || a.protocol < 1) throw new EmqError('EPROTO', `init offers protocol ${a.protocol}`);
    if (a.url == null) throw new Error('emq-node needs a server: run the check with --url');
    conn = await connect(a.url, { scripts });
    runQueues = a.queues;
    for (const name of a.queues) conn.queue(name);
    protocol = Math.min(a.protocol, PROTOCOL);
    const ops = ['init', 'reset', 'queue', 'shutdown', ...Object.keys(QUEUE_OPS)];
    if (protocol === 1) return { name: 'emq-node', version, protocol, ops };
    // v2 (DP-9d): the fence this client runs under, as connect() found or wrote it.
    const fence = (await conn.redis.get(conn.spec.keys.version)) ?? null;
    return { name: 'emq-node', version, protocol, ops: [...ops, 'batch'], fence, batch_max: BATCH_MAX };
  },
  reset: async () => null, // the client keeps no state between calls; the kit wiped the queues
  queue: async (a) => {
    conn.queue(a.name);
    return null;
  },
  shutdown: async () => null,
};

// DP-20, DP-21: the calls are checked first (a malformed batch runs nothing), then sent as
// one pipeline, each call on a run queue followed by its queue's snapshot.lua, and answered
// in order: each as if sent alone, each snapshot read after its call and before the next.
async function batch(a) {
  if (protocol < 2) throw new EmqError('EPROTO', 'batch is protocol 2');
  if (!Array.isArray(a.calls) || a.calls.length < 1 || a.calls.length > BATCH_MAX) {
    throw new EmqError('EPROTO', `a batch holds 1 to ${BATCH_MAX} calls`);
  }
  const bad = a.calls.find((call) => call === null || typeof call !== 'object' || !QUEUE_OPS[call.op] && call.op !== 'queue');
  if (bad !== undefined) throw new EmqError('EPROTO', `a batch holds queue ops and queue, not ${JSON.stringify(bad)}`);
  const sends = a.calls.flatMap((call, i) => [
    { i, send: () => answer(call), reads: READ_OPS.has(call.op) },
    ...(a.snapshot === true && runQueues.includes(call.queue)
      ? [{ i, snapshot: true, send: () => conn.queue(call.queue).snapshot(), reads: true }] : []),
  ]);
  const replies = [];
  (await pipelined(sends)).forEach((got, k) => {
    const { i, snapshot } = sends[k];
    if (!snapshot) {
      replies[i] = got;
    } else if (got.error) {
      throw new EmqError('EDRIVER', `snapshot of ${a.calls[i].queue} after ${a.calls[i].op}: ${got.error.message}`);
    } else {
      replies[i].snapshot = got.ok;
    }
  });
  return replies;
}

// The ops that write nothing: sent again after a later call, they answer as in their place.
const READ_OPS = new Set(['browse', 'counts', 'state', 'job', 'queue']);
const SETTLE_ROUNDS = 3; // a flush while the commands go again fails their tail again

// `sends` as one pipeline, in order; their outcomes ({ok} or {error}) in order. A flush
// of the server's scripts meanwhile makes the commands from some point on meet NOSCRIPT
// (they did not run): every script is loaded and they are sent again from the first of
// them. A command after it that wrote (someone loaded the scripts in between) ran out of
// order: the batch cannot be answered (EDRIVER).
async function pipelined(sends) {
  const out = [];
  for (let round = 0, from = 0; round <= SETTLE_ROUNDS; round++) {
    conn.ordered = true;
    let got;
    try {
      got = await Promise.all(sends.slice(from).map(({ send }) => send().then((ok) => ({ ok }),
        (err) => (err instanceof NoScript ? null : failed(err)))));
    } finally {
      conn.ordered = false;
    }
    out.splice(from, got.length, ...got);
    const first = got.indexOf(null);
    if (first < 0) return out;
    if (got.some((g, k) => k > first && g !== null && !sends[from + k].reads)) {
      throw new EmqError('EDRIVER', 'the scripts were flushed while a batch was on the wire and a call after the '
        + 'first that met NOSCRIPT ran first: the batch cannot be answered in order');
    }
    from += first;
    await conn.load();
  }
  throw new EmqError('EDRIVER', `the scripts were flushed ${SETTLE_ROUNDS + 1} times while a batch was on the wire`);
}

const failed = (err) => ({ error: { code: err instanceof EmqError ? err.code : 'EDRIVER',
  message: err instanceof EmqError ? err.detail : String(err) } });

async function settle(promise) {
  try {
    return { ok: await promise };
  } catch (err) {
    return failed(err);
  }
}

async function answer(request) {
  if (request.op === 'batch') return batch(request.args ?? {});
  const args = decode(request.args ?? {});
  if (CONTROL_OPS[request.op]) return CONTROL_OPS[request.op](args);
  if (!QUEUE_OPS[request.op]) throw new EmqError('EPROTO', `unknown op ${JSON.stringify(request.op)}`);
  if (conn === null) throw new EmqError('EPROTO', `${request.op} before init`);
  return QUEUE_OPS[request.op](conn.queue(request.queue), args);
}

function reply(id, body) {
  return new Promise((resolve) => process.stdout.write(`${JSON.stringify({ id, ...body })}\n`, resolve));
}

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (err) {
    await reply(null, { error: { code: 'EPROTO', message: `not JSON: ${err.message}` } });
    continue;
  }
  await reply(request.id, await settle(answer(request)));
  if (request.op === 'shutdown') break;
}
if (conn !== null) await conn.close();
// DP-18: after shutdown the driver exits of itself; an open stdin would keep it waiting
process.stdin.destroy();
