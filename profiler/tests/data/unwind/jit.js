// Two worker threads pass a turn back and forth through a SharedArrayBuffer
// with Atomics.wait/notify: every wait is a futex wait under V8's
// FutexEmulation, called from these JavaScript functions (JIT code, named
// in /tmp/perf-<pid>.map when node runs with --perf-basic-prof).
'use strict';
const { Worker, isMainThread, workerData } = require('worker_threads');

function lockprofJsWait(a, me) {
  while (Atomics.load(a, 0) !== me) Atomics.wait(a, 0, 1 - me, 100);
}

function lockprofJsPass(a, other) {
  Atomics.store(a, 0, other);
  Atomics.notify(a, 0);
}

function lockprofJsLoop(a, me, until) {
  while (Date.now() < until) {
    lockprofJsWait(a, me);
    lockprofJsPass(a, 1 - me);
  }
}

if (isMainThread) {
  const secs = Number(process.argv[2] || 10);
  const sab = new SharedArrayBuffer(8);
  const until = Date.now() + secs * 1000;
  for (const me of [0, 1]) new Worker(__filename, { workerData: { sab, me, until } });
  console.log(`ready ${process.pid}`);
} else {
  const { sab, me, until } = workerData;
  lockprofJsLoop(new Int32Array(sab), me, until);
}
