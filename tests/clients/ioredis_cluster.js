// ioredis's Cluster against a three-node leased cluster, across a leader
// kill (run by tests/cluster_clients.rs).
//
//     node ioredis_cluster.js PORT,PORT,PORT
//
// It acquires, heartbeats and releases a lease, acquires a second one,
// prints `killing` and waits for a line on stdin (the test kills the
// leader meanwhile); then it heartbeats the second lease and acquires a
// third run against the new leader, and prints `ok`. ioredis follows
// -MOVED and retries -CLUSTERDOWN and -TRYAGAIN itself
// (retryDelayOnClusterDown, retryDelayOnTryAgain), and refreshes the
// slots when a node is lost; while the election runs it can still give
// up (no slots to refresh from, connections refused): this script then
// tries again for at most 20 s.

"use strict";

const Redis = require("ioredis");
const readline = require("readline");

const ports = process.argv[2].split(",").map(Number);

function leaseMap(reply) {
  const map = {};
  for (let i = 0; i < reply.length; i += 2) map[reply[i]] = reply[i + 1];
  return map;
}

async function untilServed(what, call) {
  const deadline = Date.now() + 20000;
  for (;;) {
    try {
      return await call();
    } catch (error) {
      // A refusal of the command itself is not the election's.
      const election = !/^(ERR|UNCERTAIN|WRONGTYPE)/.test(error.message);
      if (!election || Date.now() > deadline) throw error;
      console.log(`${what}: ${error.message}; again`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

function line() {
  return new Promise((resolve) => {
    const input = readline.createInterface({ input: process.stdin });
    input.once("line", (text) => {
      input.close();
      resolve(text);
    });
  });
}

async function main() {
  const cluster = new Redis.Cluster(
    ports.map((port) => ({ host: "127.0.0.1", port })),
    {
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      retryDelayOnFailover: 100,
      maxRedirections: 64,
      clusterRetryStrategy: (times) => Math.min(100 * times, 1000),
      redisOptions: { connectTimeout: 1000, maxRetriesPerRequest: 2 },
    },
  );
  cluster.on("error", () => {});
  const acquire = async (run, worker) => {
    const reply = await cluster.call("LEASE.ACQUIRE", run, worker, "TTL", "30");
    if (reply === null) throw new Error(`${run} is held`);
    return leaseMap(reply);
  };
  const heartbeat = (lease) =>
    cluster.call("LEASE.HEARTBEAT", lease.lease_id, lease.fencing_token);

  const a = await acquire("run-a", "w-a");
  if ((await heartbeat(a)) !== 1) throw new Error("heartbeat refused");
  const released = await cluster.call("LEASE.RELEASE", a.lease_id, a.fencing_token);
  if (released !== 1) throw new Error("release refused");
  const b = await acquire("run-b", "w-b");
  console.log(`acquired, heartbeated, released; holding ${b.lease_id}`);

  console.log("killing");
  await line();
  const started = Date.now();
  const beat = await untilServed("heartbeat", () => heartbeat(b));
  if (beat !== 1) throw new Error(`heartbeat after the kill: ${beat}`);
  const c = await untilServed("acquire", () => acquire("run-c", "w-c"));
  if (!(c.fencing_token > b.fencing_token)) throw new Error(`tokens ${b.fencing_token} ${c.fencing_token}`);
  const shown = leaseMap(await cluster.call("LEASE.GET", "run-b"));
  if (shown.lease_id !== b.lease_id) throw new Error(`LEASE.GET run-b: ${shown.lease_id}`);
  console.log(`served again ${((Date.now() - started) / 1000).toFixed(2)} s after the kill`);
  cluster.disconnect();
  // Exits once "ok" is written: its reconnection timers would keep the
  // process alive a while.
  process.stdout.write("ok\n", () => process.exit(0));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
