//! Replies as the server sends them, in RESP3 (maps, doubles) or RESP2
//! (flat arrays of pairs, numbers as bulk strings), read into plain types.

use redis::Value;

use crate::Error;

/// A run's lease, as `LEASE.ACQUIRE` and `LEASE.GET` return it.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseInfo {
    pub run_id: String,
    pub worker_id: String,
    pub lease_id: String,
    pub fencing_token: i64,
    /// Seconds since the Unix epoch, on the server's clock.
    pub expires_at: f64,
    /// `LEASE.GET` only: whether `expires_at` has passed on the server.
    pub expired: Option<bool>,
}

/// A run's data, as `LEASE.GETDATA` returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    pub value: Vec<u8>,
    /// The token of the lease that wrote it.
    pub fencing_token: i64,
    /// When it was written, on the server's clock.
    pub written_at: f64,
}

/// One tenure of a run, as `LEASE.HISTORY` returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tenure {
    pub lease_id: String,
    pub worker_id: String,
    pub fencing_token: i64,
    pub acquired_at: f64,
    pub expires_at: f64,
    /// None while the tenure is active.
    pub ended_at: Option<f64>,
    /// `active`, `released`, `released-late` or `expired`.
    pub end: String,
    pub heartbeats: i64,
}

/// A lease event published by the server (see docs/commands.md, "Lease
/// events").
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// `acquired`, `released`, `expired`, `reclaimed` or `data`.
    pub kind: String,
    pub run_id: String,
    pub fencing_token: i64,
    /// None on `__leaseevent__:<event>` channels, whose messages do not
    /// carry it.
    pub worker_id: Option<String>,
    pub channel: String,
}

/// An acquire's lease map, with the run's data when asked `WITHDATA`.
#[derive(Debug)]
pub(crate) struct Acquired {
    pub info: LeaseInfo,
    pub data: Option<Vec<u8>>,
    pub data_token: Option<i64>,
}

fn unexpected(what: &str, value: &Value) -> Error {
    Error::Protocol(format!("unexpected {what}: {value:?}"))
}

/// The key/value pairs of a map (RESP3) or a flat array (RESP2).
fn pairs(value: Value) -> Result<Vec<(String, Value)>, Error> {
    let flat = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                pairs.push((key, value));
            }
            pairs
        }
        other => return Err(unexpected("reply (not a map)", &other)),
    };
    flat.into_iter()
        .map(|(key, value)| Ok((text(&key)?, value)))
        .collect()
}

/// The value of `key` in `pairs`.
fn field<'a>(pairs: &'a [(String, Value)], key: &str) -> Result<&'a Value, Error> {
    pairs
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value)
        .ok_or_else(|| Error::Protocol(format!("reply without {key:?}")))
}

fn bytes(value: &Value) -> Result<Vec<u8>, Error> {
    match value {
        Value::BulkString(bytes) => Ok(bytes.clone()),
        Value::SimpleString(text) => Ok(text.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Ok(text.clone().into_bytes()),
        other => Err(unexpected("string", other)),
    }
}

fn text(value: &Value) -> Result<String, Error> {
    String::from_utf8(bytes(value)?).map_err(|_| unexpected("UTF-8 string", value))
}

fn int(value: &Value) -> Result<i64, Error> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected("integer", other)),
    }
}

/// A time: a double in RESP3, a bulk string in RESP2.
fn float(value: &Value) -> Result<f64, Error> {
    match value {
        Value::Double(x) => Ok(*x),
        Value::Int(n) => Ok(*n as f64),
        other => text(other)?
            .parse()
            .map_err(|_| unexpected("number", other)),
    }
}

fn optional<T>(value: &Value, read: fn(&Value) -> Result<T, Error>) -> Result<Option<T>, Error> {
    match value {
        Value::Nil => Ok(None),
        other => read(other).map(Some),
    }
}

/// A lease map, or None for null.
pub(crate) fn lease(value: Value) -> Result<Option<Acquired>, Error> {
    if value == Value::Nil {
        return Ok(None);
    }
    let pairs = pairs(value)?;
    let has = |key: &str| pairs.iter().any(|(name, _)| name == key);
    let info = LeaseInfo {
        run_id: text(field(&pairs, "run_id")?)?,
        worker_id: text(field(&pairs, "worker_id")?)?,
        lease_id: text(field(&pairs, "lease_id")?)?,
        fencing_token: int(field(&pairs, "fencing_token")?)?,
        expires_at: float(field(&pairs, "expires_at")?)?,
        expired: match has("expired") {
            true => Some(int(field(&pairs, "expired")?)? != 0),
            false => None,
        },
    };
    let (data, data_token) = match has("data") {
        true => (
            optional(field(&pairs, "data")?, bytes)?,
            optional(field(&pairs, "data_token")?, int)?,
        ),
        false => (None, None),
    };
    Ok(Some(Acquired {
        info,
        data,
        data_token,
    }))
}

/// `LEASE.GETDATA`'s reply.
pub(crate) fn run_data(value: Value) -> Result<Option<RunData>, Error> {
    if value == Value::Nil {
        return Ok(None);
    }
    let pairs = pairs(value)?;
    Ok(Some(RunData {
        value: bytes(field(&pairs, "value")?)?,
        fencing_token: int(field(&pairs, "fencing_token")?)?,
        written_at: float(field(&pairs, "written_at")?)?,
    }))
}

/// `LEASE.HISTORY`'s reply, newest first.
pub(crate) fn history(value: Value) -> Result<Vec<Tenure>, Error> {
    let Value::Array(tenures) = value else {
        return Err(unexpected("history (not an array)", &value));
    };
    tenures
        .into_iter()
        .map(|tenure| {
            let pairs = pairs(tenure)?;
            Ok(Tenure {
                lease_id: text(field(&pairs, "lease_id")?)?,
                worker_id: text(field(&pairs, "worker_id")?)?,
                fencing_token: int(field(&pairs, "fencing_token")?)?,
                acquired_at: float(field(&pairs, "acquired_at")?)?,
                expires_at: float(field(&pairs, "expires_at")?)?,
                ended_at: optional(field(&pairs, "ended_at")?, float)?,
                end: text(field(&pairs, "end")?)?,
                heartbeats: int(field(&pairs, "heartbeats")?)?,
            })
        })
        .collect()
}

/// An integer reply (`1`/`0` of HEARTBEAT, SETDATA, RELEASE).
pub(crate) fn flag(value: &Value) -> Result<bool, Error> {
    match int(value)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(unexpected("0 or 1", value)),
    }
}

/// `CONFIG GET lease-ttl`'s reply: the server's default TTL in seconds.
pub(crate) fn config_seconds(value: Value, name: &str) -> Result<f64, Error> {
    let pairs = pairs(value)?;
    float(field(&pairs, name)?)
}

/// A lease event from its channel and payload: `__lease__:<run_id>` with
/// `<event>:<token>:<worker_id>`, or `__leaseevent__:<event>` with
/// `<token>:<run_id>`. Ids may contain `:`: the fixed fields come first.
pub fn parse_event(channel: &str, payload: &[u8]) -> Option<Event> {
    let payload = std::str::from_utf8(payload).ok()?;
    if let Some(run_id) = channel.strip_prefix("__lease__:") {
        let mut parts = payload.splitn(3, ':');
        let kind = parts.next()?;
        let token = parts.next()?.parse().ok()?;
        let worker = parts.next()?;
        return Some(Event {
            kind: kind.to_owned(),
            run_id: run_id.to_owned(),
            fencing_token: token,
            worker_id: Some(worker.to_owned()),
            channel: channel.to_owned(),
        });
    }
    let kind = channel.strip_prefix("__leaseevent__:")?;
    let (token, run_id) = payload.split_once(':')?;
    Some(Event {
        kind: kind.to_owned(),
        run_id: run_id.to_owned(),
        fencing_token: token.parse().ok()?,
        worker_id: None,
        channel: channel.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_lease_reads_the_same_from_resp2_and_resp3() {
        let resp2 = Value::Array(vec![
            bulk("run_id"),
            bulk("r:1"),
            bulk("worker_id"),
            bulk("w"),
            bulk("lease_id"),
            bulk("r:1:w:7"),
            bulk("fencing_token"),
            Value::Int(7),
            bulk("expires_at"),
            bulk("10.5"),
            bulk("data"),
            bulk("step=3"),
            bulk("data_token"),
            Value::Int(6),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("run_id"), bulk("r:1")),
            (bulk("worker_id"), bulk("w")),
            (bulk("lease_id"), bulk("r:1:w:7")),
            (bulk("fencing_token"), Value::Int(7)),
            (bulk("expires_at"), Value::Double(10.5)),
            (bulk("data"), bulk("step=3")),
            (bulk("data_token"), Value::Int(6)),
        ]);
        for reply in [resp2, resp3] {
            let lease = lease(reply).unwrap().unwrap();
            assert_eq!(lease.info.lease_id, "r:1:w:7");
            assert_eq!(lease.info.fencing_token, 7);
            assert_eq!(lease.info.expires_at, 10.5);
            assert_eq!(lease.info.expired, None);
            assert_eq!(lease.data.as_deref(), Some(&b"step=3"[..]));
            assert_eq!(lease.data_token, Some(6));
        }
        assert!(lease(Value::Nil).unwrap().is_none());
    }

    #[test]
    fn events_split_at_the_first_colons() {
        let event = parse_event("__lease__:run:1", b"acquired:12:worker:a").unwrap();
        assert_eq!(
            (
                event.kind.as_str(),
                event.run_id.as_str(),
                event.fencing_token
            ),
            ("acquired", "run:1", 12)
        );
        assert_eq!(event.worker_id.as_deref(), Some("worker:a"));
        let event = parse_event("__leaseevent__:expired", b"12:run:1").unwrap();
        assert_eq!(
            (event.kind.as_str(), event.run_id.as_str()),
            ("expired", "run:1")
        );
        assert_eq!(event.worker_id, None);
        assert_eq!(parse_event("other", b"x"), None);
    }
}
