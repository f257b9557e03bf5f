//! etcd's cheapest equivalents of leased's lease commands, through the
//! `etcd-client` crate (gRPC over HTTP/2). A client either holds one
//! channel per endpoint and uses one at a time, moving to the next after
//! a failed request, as leased's clients do (`Balance::Rotate`), or one
//! channel balanced by the crate over every endpoint (`Balance::Channel`;
//! its balancer keeps sending to a dead endpoint, see docs/benchmarks.md):
//!
//! - acquire: `LeaseGrant(ttl)`, then a `Txn`: if the run's key was never
//!   created (`create_revision == 0`), put it, bound to the lease. The
//!   transaction's revision (its header's) is the key's `create_revision`:
//!   the fencing token.
//! - heartbeat: one `LeaseKeepAlive` request and its response: on a
//!   stream opened for it and closed after, as the Go client's
//!   `KeepAliveOnce` does (`Heartbeat::Once`), or on a stream the client
//!   keeps open for its lease (`Heartbeat::Stream`), as its `KeepAlive`
//!   loop does.
//! - validate: `Get(key)` (linearizable, etcd's default) and the key's
//!   `create_revision` and lease compared with the holder's.

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn,
    TxnOp,
};

use crate::Error;

/// How a client spreads its requests over the endpoints.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    Rotate,
    Channel,
}

/// How a heartbeat reaches etcd.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    Once,
    Stream,
}

pub struct Etcd {
    /// One client per endpoint (`Rotate`), or one for all (`Channel`).
    clients: Vec<Client>,
    /// The one in use, an index in `clients`.
    at: usize,
    heartbeat: Heartbeat,
}

/// A lease held in etcd, with the keep-alive stream if one is open.
pub struct Held {
    key: String,
    lease: i64,
    token: i64,
    /// Boxed: the pair is large, and most leases never open one.
    stream: Option<Box<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

impl Etcd {
    /// Channels to `endpoints` (`host:port`), as `balance` says.
    pub async fn connect(
        endpoints: &[String],
        balance: Balance,
        heartbeat: Heartbeat,
    ) -> Result<Etcd, Error> {
        let options = ConnectOptions::new().with_connect_timeout(std::time::Duration::from_secs(1));
        let mut clients = Vec::new();
        if balance == Balance::Channel {
            clients.push(Client::connect(endpoints, Some(options)).await?);
        } else {
            for endpoint in endpoints {
                clients.push(Client::connect([endpoint], Some(options.clone())).await?);
            }
        }
        Ok(Etcd {
            clients,
            at: 0,
            heartbeat,
        })
    }

    /// Another handle on the same channels (gRPC multiplexes its requests
    /// on the same connections), starting at the `first` endpoint.
    pub fn share(&self, first: usize) -> Etcd {
        Etcd {
            clients: self.clients.clone(),
            at: first % self.clients.len(),
            heartbeat: self.heartbeat,
        }
    }

    /// After a failed request: the next endpoint's channel (`Rotate`).
    pub fn next_node(&mut self, held: Option<&mut Held>) {
        self.at = (self.at + 1) % self.clients.len();
        if let Some(held) = held {
            held.stream = None;
        }
    }

    fn client(&mut self) -> &mut Client {
        &mut self.clients[self.at]
    }

    pub async fn acquire(&mut self, run: &str, worker: &str, ttl: i64) -> Result<Held, Error> {
        let lease = self.client().lease_grant(ttl, None).await?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(run, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                run,
                worker,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let reply = self.client().txn(txn).await?;
        if !reply.succeeded() {
            return Err(format!("{run} is held").into());
        }
        let token = reply
            .header()
            .ok_or("a txn reply without a header")?
            .revision();
        Ok(Held {
            key: run.to_owned(),
            lease,
            token,
            stream: None,
        })
    }

    pub async fn heartbeat(&mut self, held: &mut Held) -> Result<(), Error> {
        match self.heartbeat {
            Heartbeat::Once => {
                // Opening the stream sends the request and reads its
                // response (a TTL of 0 is an error: the lease is gone).
                self.client().lease_keep_alive(held.lease).await?;
            }
            Heartbeat::Stream => {
                if held.stream.is_none() {
                    held.stream = Some(Box::new(self.client().lease_keep_alive(held.lease).await?));
                    return Ok(());
                }
                let (keeper, stream) = &mut **held.stream.as_mut().expect("opened above");
                let sent = keeper.keep_alive().await;
                let reply = match sent {
                    Ok(()) => stream.message().await,
                    Err(e) => Err(e),
                };
                match reply {
                    Ok(Some(reply)) if reply.ttl() > 0 => {}
                    Ok(Some(_)) => return Err("the lease is gone (TTL 0)".into()),
                    Ok(None) => {
                        held.stream = None;
                        return Err("the keep-alive stream ended".into());
                    }
                    Err(e) => {
                        held.stream = None;
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn validate(&mut self, held: &Held) -> Result<(), Error> {
        let reply = self.client().get(held.key.as_str(), None).await?;
        match reply.kvs().first() {
            Some(kv) if kv.create_revision() == held.token && kv.lease() == held.lease => Ok(()),
            Some(kv) => Err(format!(
                "{} has token {} (lease {:x}), not {} (lease {:x})",
                held.key,
                kv.create_revision(),
                kv.lease(),
                held.token,
                held.lease
            )
            .into()),
            None => Err(format!("{} is gone", held.key).into()),
        }
    }

    /// The index in `endpoints` of the leader, as its own status says.
    pub async fn leader(endpoints: &[String]) -> Result<usize, Error> {
        for (i, endpoint) in endpoints.iter().enumerate() {
            let Ok(mut client) = Client::connect([endpoint], None).await else {
                continue;
            };
            let Ok(status) = client.status().await else {
                continue;
            };
            let me = status.header().map(|h| h.member_id());
            if me == Some(status.leader()) {
                return Ok(i);
            }
        }
        Err("no etcd endpoint says it leads".into())
    }
}
