// emq.js — an EchoMQ client for Node.js 20 on iovalkey (specs/lifecycle.md).
//
// It runs the project's Lua scripts as `emq scripts --out DIR` writes them (assembled,
// byte for byte what the Python client loads) and checks arguments before any I/O
// against DIR/transitions.json, in the contract's order (CC-5): the id (EMQKIND), then
// each argument in table order (EMQARG), then the explicit clock. A refused call sends
// nothing. Production code passes no `now`: the scripts then read the server clock.

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Valkey from 'iovalkey';

export const CODES = ['EMQKIND', 'EMQSTALE', 'EMQSTATE', 'EMQLOCK', 'EMQARG', 'EMQVERSION', 'EMQTYPE'];
const READ_SCRIPTS = ['counts', 'state', 'snapshot'];
const KEY_NAMES = ['pending', 'active', 'schedule', 'dead', 'completed', 'failed'];
const ID_SHAPE = /^[A-Z]{3}[0-9A-Za-z]{11}$/;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
// KS-3: `{`, `}`, whitespace and every non-printable character (Unicode C* and Z*).
const BAD_QUEUE_CHAR = /[{}\s\p{C}\p{Z}]/u;

/** A refused call: `code` is one of CODES; nothing changed. */
export class EmqError extends Error {
  constructor(code, detail) {
    super(`${code} ${detail}`);
    this.code = code;
    this.detail = detail;
  }
}

/** A call that met NOSCRIPT in an ordered pipeline (`Connection.ordered`): it did not run. */
export class NoScript extends Error {
  constructor(name) {
    super(`NOSCRIPT ${name}.lua is not loaded`);
  }
}

const refuse = (code, detail) => {
  throw new EmqError(code, detail);
};

/** A single-command read (browse, job): a WRONGTYPE reply is EMQTYPE (CC-8). */
const typed = async (key, reply) => {
  try {
    return await reply;
  } catch (err) {
    if (String(err.message).startsWith('WRONGTYPE')) refuse('EMQTYPE', `${key} holds another type than its grammar's`);
    throw err;
  }
};

/** The scripts and the table written by `emq scripts --out dir`. */
export function loadBundle(dir) {
  let text;
  try {
    text = readFileSync(join(dir, 'transitions.json'), 'utf8');
  } catch (err) {
    throw new Error(`no scripts in ${dir} (${err.code}): run \`emq scripts --out ${dir}\``);
  }
  const spec = JSON.parse(text);
  // snowflake_max is 2^63-1, beyond a double: read it from the text, exactly.
  spec.snowflakeMax = BigInt(/"snowflake_max":\s*(\d+)/.exec(text)[1]);
  const names = Object.keys(spec.ops).filter((op) => spec.ops[op].kind === 'transition')
    .concat(READ_SCRIPTS, Object.keys(spec.lane_ops ?? {}));
  const scripts = {};
  for (const name of names) {
    const source = readFileSync(join(dir, `${name}.lua`));
    scripts[name] = { source, sha: createHash('sha1').update(source).digest('hex') };
  }
  return { spec, scripts };
}

function checkId(spec, value) {
  if (typeof value !== 'string' || !ID_SHAPE.test(value) || value.slice(0, 3) !== 'JOB') {
    refuse('EMQKIND', `not a well-formed JOB id: ${JSON.stringify(value) ?? String(value)}`);
  }
  let n = 0n;
  for (const ch of value.slice(3)) n = n * 62n + BigInt(BASE62.indexOf(ch));
  if (n > spec.snowflakeMax) refuse('EMQKIND', `${value} overflows the snowflake range`);
  return value;
}

function bound(spec, b) {
  return typeof b === 'string' ? spec.limits[b] : b;
}

/** One argument checked against its type in the table; the value as it goes on the wire. */
function checkValue(spec, type, name, value) {
  const t = spec.types[type];
  if (type === 'job_id') return checkId(spec, value);
  if (type === 'payload' || type === 'text') {
    let bytes;
    if (typeof value === 'string') bytes = Buffer.from(value, 'utf8');
    else if (value instanceof Uint8Array) bytes = Buffer.from(value);
    else refuse('EMQARG', `${name} must be bytes or a string`);
    if (t.max_bytes !== undefined && bytes.length > bound(spec, t.max_bytes)) {
      refuse('EMQARG', `${name} is longer than ${bound(spec, t.max_bytes)} bytes`);
    }
    return bytes;
  }
  if (t.alphabet) {
    // a group name (LANE-2): 1 to max_bytes characters of the alphabet, one byte each
    const hi = bound(spec, t.max_bytes);
    if (typeof value !== 'string' || value.length < t.min_bytes || value.length > hi
        || [...value].some((ch) => !t.alphabet.includes(ch))) {
      refuse('EMQARG', `${name} must be ${t.min_bytes} to ${hi} characters of 0-9 A-Z a-z _ . -`);
    }
    return value;
  }
  if (t.values) {
    if (!t.values.includes(value)) refuse('EMQARG', `${name} must be one of ${t.values.join(', ')}`);
    return value;
  }
  const lo = bound(spec, t.min);
  const hi = bound(spec, t.max);
  if (!Number.isInteger(value) || value < lo || value > hi) {
    refuse('EMQARG', `${name} must be an integer in [${lo}, ${hi}]`);
  }
  return value;
}

/** Every argument of `op` in table order; `undefined` takes the table's default, and
 * an optional argument may be null or undefined (absent). */
function checkArgs(spec, op, values) {
  const out = {};
  for (const arg of (spec.ops[op] ?? spec.lane_ops[op]).args) {
    const value = values[arg.name] === undefined ? (arg.default ?? undefined) : values[arg.name];
    out[arg.name] = arg.optional && value == null ? null : checkValue(spec, arg.type, arg.name, value);
  }
  return out;
}

/** KS-3: a queue name, or EMQARG. */
export function checkQueue(spec, name) {
  if (typeof name !== 'string') refuse('EMQARG', 'a queue name is a string');
  const size = Buffer.byteLength(name, 'utf8');
  if (size === 0 || size > spec.limits.queue_max_bytes) refuse('EMQARG', `a queue name is 1 to ${spec.limits.queue_max_bytes} bytes`);
  if (BAD_QUEUE_CHAR.test(name)) refuse('EMQARG', `queue name ${JSON.stringify(name)} holds a forbidden character`);
  return name;
}

const text = (b) => (Buffer.isBuffer(b) ? b.toString('utf8') : String(b));
const laneJob = ([id, payload, token, group]) => ({ id: text(id), payload, token: Number(token), group: text(group) });

/** Connect to `url` (redis:// or valkey://), fence (KS-6) and load the scripts of `scripts`. */
export async function connect(url, { scripts }) {
  const bundle = loadBundle(scripts);
  const redis = new Valkey(url.replace(/^valkey(s?):\/\//, 'redis$1://'), {
    lazyConnect: true,
    maxRetriesPerRequest: 0, // a call is never resent: the script may have run
    retryStrategy: () => null,
  });
  await redis.connect();
  const conn = new Connection(redis, bundle);
  await conn.fence();
  await conn.load();
  return conn;
}

export class Connection {
  constructor(redis, { spec, scripts }) {
    this.redis = redis;
    this.spec = spec;
    this.scripts = scripts;
    this.ordered = false;
  }

  /** KS-6: the wire-version fence. */
  async fence() {
    const key = this.spec.keys.version;
    let got = await this.redis.get(key);
    if (got === null) {
      await this.redis.set(key, this.spec.wire_version, 'NX');
      got = await this.redis.get(key);
    }
    if (got !== this.spec.wire_version) refuse('EMQVERSION', `${key} is ${got}, this client speaks ${this.spec.wire_version}`);
  }

  async load() {
    await Promise.all(Object.entries(this.scripts).map(async ([name, { source, sha }]) => {
      const got = await this.redis.script('LOAD', source);
      if (got !== sha) throw new Error(`server hashed ${name}.lua as ${got}, expected ${sha}`);
    }));
  }

  /** EVALSHA; on NOSCRIPT (the call did not run) load every script and call again, once:
   * after a flush a later pipeline then meets none at one call and not at another. While
   * `ordered` (a pipeline that must keep its order) NOSCRIPT throws `NoScript` instead:
   * the pipeline's sender sends it again in its place. */
  async run(name, keys, args) {
    const call = () => this.redis.evalshaBuffer(this.scripts[name].sha, keys.length, ...keys, ...args);
    try {
      try {
        return await call();
      } catch (err) {
        if (!String(err.message).startsWith('NOSCRIPT')) throw err;
        if (this.ordered) throw new NoScript(name);
        await this.load();
        return await call();
      }
    } catch (err) {
      if (err instanceof NoScript) throw err;
      const [code, ...rest] = String(err.message).split(' ');
      if (CODES.includes(code)) throw new EmqError(code, rest.join(' '));
      throw err;
    }
  }

  queue(name) {
    return new Queue(this, checkQueue(this.spec, name));
  }

  async close() {
    await this.redis.quit();
  }
}

export class Queue {
  constructor(conn, name) {
    this.conn = conn;
    this.spec = conn.spec;
    this.name = name;
    this.keys = KEY_NAMES.map((k) => conn.spec.keys[k].replace('{q}', () => `{${name}}`));
    this.lastDropped = [];
  }

  rowKey(id) {
    // <id> first: a queue name may hold '<id>' itself (KS-3), an id never holds '{q}' (ID-1)
    return this.spec.keys.row.replace('<id>', () => id).replace('{q}', () => `{${this.name}}`);
  }

  // An explicit clock (CLK-2) as the trailing argument, checked last (CC-6).
  clock(now) {
    return now == null ? [] : [String(checkValue(this.spec, 'time', 'now', now))];
  }

  async transition(op, a, argv, now, rowKey = true) {
    const keys = rowKey ? [...this.keys, this.rowKey(a.id)] : this.keys;
    const wire = argv.map((v) => (typeof v === 'number' ? String(v) : v ?? ''));
    return this.conn.run(op, keys, [...wire, ...this.clock(now)]);
  }

  async enqueue(id, payload) {
    const a = checkArgs(this.spec, 'enqueue', { id, payload });
    return text(await this.transition('enqueue', a, [a.id, a.payload]));
  }

  async schedule(id, payload, { runAt, delayMs, now } = {}) {
    const a = checkArgs(this.spec, 'schedule', { id, payload, run_at: runAt, delay_ms: delayMs });
    if ((a.run_at === null) === (a.delay_ms === null)) refuse('EMQARG', 'schedule takes exactly one of runAt and delayMs');
    const [mode, value] = a.run_at !== null ? ['at', a.run_at] : ['in', a.delay_ms];
    return text(await this.transition('schedule', a, [a.id, a.payload, mode, value], now));
  }

  /** T-claim: {id, payload, token} or null; `lastDropped` lists the orphans dropped. */
  async claim(leaseMs, { now } = {}) {
    const a = checkArgs(this.spec, 'claim', { lease_ms: leaseMs });
    const reply = await this.transition('claim', a, [a.lease_ms], now, false);
    const job = text(reply[0]) === 'job';
    const dropped = reply.slice(job ? 4 : 1).map(text);
    this.lastDropped = dropped;
    return job ? { id: text(reply[1]), payload: reply[2], token: Number(reply[3]) } : null;
  }

  async complete(id, token) {
    const a = checkArgs(this.spec, 'complete', { id, token });
    return text(await this.transition('complete', a, [a.id, a.token]));
  }

  async retry(id, token, { delayMs, maxAttempts, error, now } = {}) {
    const a = checkArgs(this.spec, 'retry', { id, token, delay_ms: delayMs, max_attempts: maxAttempts, error });
    return text(await this.transition('retry', a, [a.id, a.token, a.delay_ms, a.max_attempts, a.error], now));
  }

  async extend(id, token, leaseMs, { now } = {}) {
    const a = checkArgs(this.spec, 'extend', { id, token, lease_ms: leaseMs });
    return text(await this.transition('extend', a, [a.id, a.token, a.lease_ms], now));
  }

  async promote({ limit, now } = {}) {
    const a = checkArgs(this.spec, 'promote', { limit });
    return Number(await this.transition('promote', a, [a.limit], now, false));
  }

  async reap({ limit, maxAttempts, now } = {}) {
    const a = checkArgs(this.spec, 'reap', { limit, max_attempts: maxAttempts });
    return Number(await this.transition('reap', a, [a.limit, a.max_attempts], now, false));
  }

  async reprocess(id) {
    const a = checkArgs(this.spec, 'reprocess', { id });
    return text(await this.transition('reprocess', a, [a.id]));
  }

  async remove(id) {
    const a = checkArgs(this.spec, 'remove', { id });
    return text(await this.transition('remove', a, [a.id]));
  }

  // -- lanes (lifecycle.md §10) --

  async laneEnqueue(id, payload, group) {
    const a = checkArgs(this.spec, 'lane_enqueue', { id, payload, group });
    return text(await this.transition('lane_enqueue', a, [a.id, a.payload, a.group]));
  }

  /** T-lane_claim: {id, payload, token, group} or null; `lastDropped` lists the orphans dropped. */
  async laneClaim(leaseMs, { now } = {}) {
    const a = checkArgs(this.spec, 'lane_claim', { lease_ms: leaseMs });
    const reply = await this.transition('lane_claim', a, [a.lease_ms], now, false);
    const job = text(reply[0]) === 'job';
    this.lastDropped = reply.slice(job ? 5 : 1).map(text);
    return job ? laneJob(reply.slice(1, 5)) : null;
  }

  /** T-lane_wclaim: the jobs of one lane's turn, [{id, payload, token, group}, ...]. */
  async laneWclaim(leaseMs, { now } = {}) {
    const a = checkArgs(this.spec, 'lane_wclaim', { lease_ms: leaseMs });
    const [flat, dropped] = await this.transition('lane_wclaim', a, [a.lease_ms], now, false);
    this.lastDropped = dropped.map(text);
    const jobs = [];
    for (let i = 0; i < flat.length; i += 4) jobs.push(laneJob(flat.slice(i, i + 4)));
    return jobs;
  }

  async lanePause(group) {
    return this.laneConfig('lane_pause', { group });
  }

  async laneResume(group) {
    return this.laneConfig('lane_resume', { group });
  }

  async laneLimit(group, n) {
    return this.laneConfig('lane_limit', { group, n });
  }

  async laneWeight(group, w) {
    return this.laneConfig('lane_weight', { group, w });
  }

  async laneConfig(op, values) {
    const a = checkArgs(this.spec, op, values);
    return text(await this.transition(op, a, Object.values(a), undefined, false));
  }

  /** R-browse: the n newest pending ids, newest first. */
  async browse(n) {
    const a = checkArgs(this.spec, 'browse', { n });
    const ids = await typed(this.keys[0], this.conn.redis.zrangeBuffer(this.keys[0], '+', '-', 'BYLEX', 'REV', 'LIMIT', 0, a.n));
    return ids.map(text);
  }

  async counts() {
    const reply = await this.conn.run('counts', this.keys, []);
    return Object.fromEntries(Object.keys(this.spec.locations).map((loc, i) => [loc, Number(reply[i])]));
  }

  async state(id) {
    const a = checkArgs(this.spec, 'state', { id });
    return text(await this.conn.run('state', [...this.keys, this.rowKey(a.id)], [a.id]));
  }

  /** The queue's whole keyspace in one read (snapshot.lua), in the driver protocol's
   * wire shape: {queue, pending: [[id, score]], ..., rows: {id: {field: {b64}}},
   * completed, failed, stray}. A counter hash the grammar does not describe is stray. */
  async snapshot() {
    const reply = await this.conn.run('snapshot', this.keys, []);
    const pairs = (flat) => flat.reduce((out, v, i) => (i % 2 ? out : [...out, [v, flat[i + 1]]]), []);
    const out = { queue: this.name };
    const locations = Object.keys(this.spec.locations);
    locations.forEach((loc, i) => { out[loc] = pairs(reply[i]).map(([m, s]) => [text(m), Number(text(s))]); });
    const n = locations.length;
    out.rows = Object.fromEntries(pairs(reply[n]).map(([id, fields]) => [text(id),
      Object.fromEntries(pairs(fields).map(([f, v]) => [text(f), { b64: Buffer.from(v).toString('base64') }]))]));
    out.stray = reply[n + 3].map(text);
    ['completed', 'failed'].forEach((name, i) => {
      const fields = Object.fromEntries(pairs(reply[n + 1 + i]).map(([f, v]) => [text(f), text(v)]));
      const { count = '0', ...rest } = fields;
      const canonical = /^(0|[1-9][0-9]*)$/.test(count);
      if (Object.keys(rest).length || !canonical) out.stray.push(this.keys[4 + i]);
      out[name] = canonical ? Number(count) : 0;
    });
    // The lanes (lifecycle.md §10): each lane's pending set, the ring, the paused groups
    // and the three group hashes; a hash value that is no integer is a stray key.
    out.lanes = Object.fromEntries(pairs(reply[n + 4]).map(([g, flat]) => [text(g),
      pairs(flat).map(([m, v]) => [text(m), Number(text(v))])]));
    out.ring = reply[n + 5].map(text);
    out.paused = reply[n + 6].map(text);
    const prefix = this.keys[0].slice(0, this.keys[0].length - 'pending'.length);
    ['glimit', 'gactive', 'gweight'].forEach((name, i) => {
      const fields = pairs(reply[n + 7 + i]).map(([g, v]) => [text(g), text(v)]);
      const ints = fields.filter(([, v]) => /^-?(0|[1-9][0-9]*)$/.test(v));
      if (ints.length !== fields.length) out.stray.push(prefix + name);
      out[name] = Object.fromEntries(ints.map(([g, v]) => [g, Number(v)]));
    });
    return out;
  }

  /** R-job: the row's fields (Buffers), or null. */
  async job(id) {
    const a = checkArgs(this.spec, 'job', { id });
    const row = await typed(this.rowKey(a.id), this.conn.redis.hgetallBuffer(this.rowKey(a.id)));
    return Object.keys(row).length ? row : null;
  }
}
