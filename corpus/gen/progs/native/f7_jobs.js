// Node.js jobs for the f7r- tuning cases: a data/inference script that dies of an uncaught
// error in several ways, and one that handles its error (rules node_* in classify/rules.yaml).
// Usage: node f7_jobs.js MODE [ARG]
'use strict';
const fs = require('fs');
const path = require('path');

const mode = process.argv[2];
console.log(`pipeline: mode ${mode}`);

function loadConfig(file) {
  const raw = fs.readFileSync(file, 'utf8');
  return JSON.parse(raw);
}

if (mode === 'config') {
  // a config file with a trailing comma: JSON.parse throws a SyntaxError
  const dir = process.argv[3];
  const file = path.join(dir, 'pipeline.json');
  fs.writeFileSync(file, '{"model": "resnet50", "batch": 64,}\n');
  const cfg = loadConfig(file);
  console.log(`model ${cfg.model}`);
} else if (mode === 'labels') {
  // the label map is not where the script looks
  const labels = loadConfig(process.argv[3]);
  console.log(`${Object.keys(labels).length} labels`);
} else if (mode === 'backend') {
  // a backend package not installed next to the script
  const ort = require('onnxruntime-node-gpu');
  console.log(ort.version);
} else if (mode === 'check') {
  // the script's own check throws a plain Error
  const shards = ['a', 'b', 'c'];
  if (shards.length % 2 !== 0) throw new Error(`uneven shard count ${shards.length} for 2 workers`);
} else if (mode === 'cache') {
  // an in-memory cache that never evicts: the heap reaches its limit
  const cache = [];
  for (let i = 0; ; i++) {
    cache.push({ key: `sample-${i}`, emb: new Array(256).fill(i) });
    if (i % 200000 === 0) console.log(`cached ${i}`);
  }
} else if (mode === 'handled') {
  try {
    loadConfig('/nonexistent/overrides.json');
  } catch (err) {
    console.log(`no overrides (${err.message}); using defaults`);
  }
  console.log('pipeline done');
}
