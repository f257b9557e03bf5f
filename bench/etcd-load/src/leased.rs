//! leased's lease commands through the `redis` crate: one multiplexed
//! connection per client, to one node of the cluster at a time (followers
//! proxy to the leader). After a failed request the caller moves the
//! client to the next node, round-robin (`next_node`), and sends again.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};

use crate::Error;

pub struct Leased {
    endpoints: Vec<String>,
    /// The node this client talks to, an index in `endpoints`.
    node: usize,
    connection: Option<MultiplexedConnection>,
}

/// A lease held in leased.
pub struct Held {
    run: String,
    id: Vec<u8>,
    token: i64,
}

impl Leased {
    /// A client of node `first` of `endpoints` (`host:port`), connected on
    /// its first command.
    pub fn new(endpoints: &[String], first: usize) -> Leased {
        Leased {
            endpoints: endpoints.to_vec(),
            node: first % endpoints.len(),
            connection: None,
        }
    }

    async fn connection(&mut self) -> Result<&mut MultiplexedConnection, Error> {
        if self.connection.is_none() {
            let endpoint = &self.endpoints[self.node];
            let client = Client::open(format!("redis://{endpoint}/"))?;
            // The caller times every request out itself, the same way for
            // both systems; the crate's own 500 ms would cut off replies a
            // loaded machine delays.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(None);
            let connection = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            self.connection = Some(connection);
        }
        Ok(self.connection.as_mut().expect("connected above"))
    }

    /// Drops the connection and moves to the next node.
    pub fn next_node(&mut self) {
        self.connection = None;
        self.node = (self.node + 1) % self.endpoints.len();
    }

    async fn query(&mut self, cmd: &redis::Cmd) -> Result<Value, Error> {
        let connection = self.connection().await?;
        Ok(cmd.query_async::<Value>(connection).await?)
    }

    pub async fn acquire(&mut self, run: &str, worker: &str, ttl: i64) -> Result<Held, Error> {
        let mut cmd = redis::cmd("LEASE.ACQUIRE");
        cmd.arg(run).arg(worker).arg("TTL").arg(ttl);
        let reply = self.query(&cmd).await?;
        let Value::Array(fields) = reply else {
            return Err(format!("{run}: no lease in {reply:?}").into());
        };
        let (mut id, mut token) = (None, None);
        for pair in fields.chunks(2) {
            match pair {
                [Value::BulkString(key), Value::BulkString(value)] if key == b"lease_id" => {
                    id = Some(value.clone())
                }
                [Value::BulkString(key), Value::Int(value)] if key == b"fencing_token" => {
                    token = Some(*value)
                }
                _ => {}
            }
        }
        match (id, token) {
            (Some(id), Some(token)) => Ok(Held {
                run: run.to_owned(),
                id,
                token,
            }),
            _ => Err(format!("{run}: no lease id or token in {fields:?}").into()),
        }
    }

    pub async fn heartbeat(&mut self, held: &mut Held) -> Result<(), Error> {
        let mut cmd = redis::cmd("LEASE.HEARTBEAT");
        cmd.arg(&held.id).arg(held.token);
        self.expect_one(&cmd).await
    }

    pub async fn validate(&mut self, held: &Held) -> Result<(), Error> {
        let mut cmd = redis::cmd("LEASE.VALIDATE");
        cmd.arg(&held.run).arg(&held.id).arg(held.token);
        self.expect_one(&cmd).await
    }

    async fn expect_one(&mut self, cmd: &redis::Cmd) -> Result<(), Error> {
        match self.query(cmd).await? {
            Value::Int(1) => Ok(()),
            other => Err(format!("answered {other:?}, not 1").into()),
        }
    }

    /// The index in `endpoints` of the node whose `ROLE` is master.
    pub async fn leader(endpoints: &[String]) -> Result<usize, Error> {
        for i in 0..endpoints.len() {
            let mut client = Leased::new(endpoints, i);
            let Ok(Value::Array(role)) = client.query(&redis::cmd("ROLE")).await else {
                continue;
            };
            if matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
                return Ok(i);
            }
        }
        Err("no leased node says it is the master".into())
    }
}
