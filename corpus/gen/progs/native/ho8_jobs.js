// Held-out set 8's Node.js jobs (data preparation / serving helpers run inside batch jobs):
// `node ho8_jobs.js MODE [ARG ...]`, each failing (or not) by itself.
'use strict';
const fs = require('fs');
const [mode, a1, a2] = process.argv.slice(2);
const say = (s) => console.log(s);

function records(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push({ id: i, text: `sample ${i} `.repeat(8), tokens: [i, i + 1, i + 2] });
  return out;
}

const modes = {
  typeerror() {  // a manifest entry without its `meta` field
    const manifest = [{ path: 'shard-000.tar', meta: { n: 512 } }, { path: 'shard-001.tar' }];
    let total = 0;
    for (const m of manifest) { say(`counting ${m.path}`); total += m.meta.n; }
    say(`total ${total}`);
  },
  enoent() { say(`reading label map ${a1}`); const m = JSON.parse(fs.readFileSync(a1, 'utf8')); say(Object.keys(m).length); },
  require_missing() { say('resizing 4096 images to 224x224'); const sharp = require('sharp'); say(typeof sharp); },
  write() {  // write JSONL shards of `a2` records each
    const n = parseInt(a2 || '200000', 10);
    say(`writing ${n} records to ${a1}`);
    const fd = fs.openSync(a1, 'w');
    const recs = records(1000);
    for (let i = 0; i < n; i += 1000) {
      fs.writeSync(fd, recs.map((r) => JSON.stringify(r)).join('\n') + '\n');
      if (i % 50000 === 0) say(`  ${i} records`);
    }
    fs.closeSync(fd);
    say('done');
  },
  heap() {  // keeps every parsed record in one array: the heap grows past --max-old-space-size
    const all = [];
    for (let i = 0; ; i++) {
      for (const r of records(10000)) all.push(r);
      if (i % 5 === 0) say(`dedup index: ${all.length} records`);
    }
  },
  loop() {
    let i = 0;
    say('tokenizing corpus shards');
    setInterval(() => { say(`shard ${i++} done, ${(i * 1.7).toFixed(1)}M tokens`); }, 2000);
  },
  quiet_exit() { say('validating 12 shard manifests'); for (let i = 0; i < 7; i++) say(`manifest ${i} ok`); process.exit(2); },
  wait_forever() {  // waits for a queue message that never comes: no output, no exit
    say('waiting for the next work item from the coordinator');
    const t = setInterval(() => {}, 1 << 30);
    return t;
  },
  fetch_timeout() {
    const url = `http://127.0.0.1:${a1}/bucket/shards/shard-0041.tar`;
    say(`GET ${url}`);
    fetch(url, { signal: AbortSignal.timeout(5000) }).then((r) => r.arrayBuffer()).then((b) => say(`got ${b.byteLength} bytes`));
  },
  retry_ok() {  // a transient error caught and retried: the export finishes
    say('exporting metrics to the tracking server');
    for (let attempt = 1; attempt <= 2; attempt++) {
      if (attempt === 1) { console.error('warning: export attempt 1 failed: Error: read ECONNRESET; retrying in 1s'); continue; }
      say('export attempt 2: 1840 rows sent');
    }
    say('errors: 0 (1 retried)');
    say('done');
  },
  caught_exit0() {  // the error is logged and the process still exits 0
    try {
      const cfg = JSON.parse('{"lr": 3e-4, "warmup": }');
      say(cfg);
    } catch (e) {
      console.error(e);
      console.error('ERROR: could not parse run config, giving up');
    }
  },
};
if (!modes[mode]) { console.error(`unknown mode ${mode}`); process.exit(64); }
modes[mode]();
