// f8b- tuning cases: a Node.js step of a data pipeline whose network read fails (undici's
// fetch, node:http, node:net) or whose caught error ends the work while it exits 0.
// Usage: node f8_jobs.js MODE [PORT]
'use strict';
const http = require('node:http');
const net = require('node:net');

const mode = process.argv[2];
const port = Number(process.argv[3] || 9);
const url = `http://127.0.0.1:${port}/datasets/laion-subset/part-00017.parquet`;

async function fetchShard() {                 // undici: the server reset / closed the socket
  console.log(`GET ${url}`);
  const res = await fetch(url);
  console.log(`${res.status} ${(await res.arrayBuffer()).byteLength} bytes`);
}

async function fetchAborted() {               // a user timer aborting a stalled request
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(), 3000);
  console.log(`GET ${url} (3 s budget)`);
  const res = await fetch(url, { signal: ctl.signal });
  console.log(res.status);
}

function httpGet() {                          // node:http, the peer closed before answering
  console.log(`downloading ${url}`);
  http.get(url, (res) => { res.resume(); res.on('end', () => console.log('done')); });
}

async function fetchRefused() {               // a port nobody listens on (freed just before)
  const srv = net.createServer();
  await new Promise((ok) => srv.listen(0, '127.0.0.1', ok));
  const free = srv.address().port;
  await new Promise((ok) => srv.close(ok));
  const to = `http://127.0.0.1:${free}/v1/embeddings/batch-0003.npy`;
  console.log(`GET ${to}`);
  const res = await fetch(to);
  console.log(res.status);
}

function tcpConnect() {                       // a feature store that is not listening
  console.log(`connecting to feature store 127.0.0.1:${port}`);
  const s = net.connect(port, '127.0.0.1', () => s.end());
}

function caughtExit0() {                      // the error is printed, the work stops, exit 0
  const manifest = { shards: null };
  console.log('resolving 24 shard manifests');
  try {
    const first = manifest.shards.map((s) => s.path)[0];
    console.log(first);
  } catch (err) {
    console.error(err);
    console.error('manifest step failed, stopping the export');
    return;
  }
}

function caughtRetriedOk() {                  // a failure caught and retried, the work goes on
  for (let attempt = 1; attempt <= 2; attempt++) {
    try {
      if (attempt === 1) JSON.parse('{"lr": 0.1,');
      console.log(`attempt ${attempt}: config parsed`);
      break;
    } catch (err) {
      console.error(err);
      console.error(`attempt ${attempt} failed, retrying with the backup config`);
    }
  }
  for (let i = 0; i < 4; i++) console.log(`exported shard ${i}`);
  console.log('export finished: 4 shards, 0 errors');
}

const modes = { fetch: fetchShard, fetch_refused: fetchRefused, fetch_abort: fetchAborted, http_get: httpGet,
  tcp_connect: tcpConnect, caught_exit0: caughtExit0, caught_retried_ok: caughtRetriedOk };
if (!modes[mode]) { console.error(`unknown mode ${mode}`); process.exit(2); }
const r = modes[mode]();
if (r instanceof Promise) r.then(() => {});
