//! Publish/subscribe, as Redis has it: connections subscribe to channels
//! and to glob patterns; a message published to a channel reaches every
//! connection subscribed to it, once per matching subscription. Only the
//! server publishes (lease events): there is no `PUBLISH`.
//!
//! Each subscribed connection has a queue of its own that it drains into
//! its output, so a publisher never waits for a subscriber; one that does
//! not read is cut off by its output limit (`client-output-buffer-limit
//! pubsub`), and nobody else notices. While nobody subscribes, publishing
//! costs one atomic load.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::glob;
use crate::reply::{Protocol, Reply};

/// A message for subscribers, encoded once for everyone it reaches: the
/// RESP2 array `[message, channel, payload]` or `[pmessage, pattern,
/// channel, payload]`. In RESP3 it is the same push: only the type byte
/// of the outer aggregate differs (`>` for `*`), so a fan-out to a
/// hundred subscribers encodes once and copies bytes a hundred times.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    resp2: Bytes,
}

impl Message {
    /// On a channel the subscriber subscribed to.
    pub fn on_channel(channel: &[u8], payload: &Bytes) -> Message {
        Message::encoded(vec![
            Reply::text("message"),
            Reply::Bulk(Bytes::copy_from_slice(channel)),
            Reply::Bulk(payload.clone()),
        ])
    }

    /// On a channel that matches a pattern the subscriber subscribed to.
    pub fn on_pattern(pattern: &Bytes, channel: &[u8], payload: &Bytes) -> Message {
        Message::encoded(vec![
            Reply::text("pmessage"),
            Reply::Bulk(pattern.clone()),
            Reply::Bulk(Bytes::copy_from_slice(channel)),
            Reply::Bulk(payload.clone()),
        ])
    }

    fn encoded(items: Vec<Reply>) -> Message {
        let mut out = BytesMut::new();
        Reply::Array(items).encode(Protocol::Resp2, &mut out);
        Message {
            resp2: out.freeze(),
        }
    }

    /// Appends the message for a client speaking `protocol`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        match protocol {
            Protocol::Resp2 => out.extend_from_slice(&self.resp2),
            Protocol::Resp3 => {
                out.extend_from_slice(b">");
                out.extend_from_slice(&self.resp2[1..]);
            }
        }
    }
}

/// Every subscription of every connection.
#[derive(Debug, Default)]
pub struct PubSub {
    subscriptions: Mutex<Subscriptions>,
    /// Subscriptions held, channels and patterns: 0 means nobody listens.
    count: AtomicUsize,
    /// The server's clock (as f64 bits) when the first subscription of
    /// the latest listening spell was made: events are owed from then.
    since: AtomicU64,
    /// Notified when someone starts listening, so that the core, which
    /// makes events only while they are wanted, starts at once.
    started: Notify,
}

#[derive(Debug, Default)]
struct Subscriptions {
    /// Channel → the subscribed connections (by client id) and their queues.
    channels: HashMap<Bytes, BTreeMap<u64, UnboundedSender<Message>>>,
    /// Pattern → likewise.
    patterns: HashMap<Bytes, BTreeMap<u64, UnboundedSender<Message>>>,
}

/// One connection's way in: its queue, and the client id its
/// subscriptions are filed under.
#[derive(Debug)]
pub struct Inbox {
    pub client_id: u64,
    sender: UnboundedSender<Message>,
    pub receiver: UnboundedReceiver<Message>,
}

impl Inbox {
    pub fn new(client_id: u64) -> Inbox {
        let (sender, receiver) = unbounded_channel();
        Inbox {
            client_id,
            sender,
            receiver,
        }
    }
}

/// Which kind of name a subscription is by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
}

impl PubSub {
    /// Whether anyone subscribes to anything.
    pub fn active(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Subscribes `inbox` to `name` at `now` on the server's clock; false
    /// if it already was.
    pub fn subscribe(&self, inbox: &Inbox, kind: Kind, name: &Bytes, now: f64) -> bool {
        let mut subscriptions = self.lock();
        let map = subscriptions.of(kind).entry(name.clone()).or_default();
        let added = map.insert(inbox.client_id, inbox.sender.clone()).is_none();
        if added && self.count.load(Ordering::Relaxed) == 0 {
            self.since.store(now.to_bits(), Ordering::Relaxed);
            self.count.fetch_add(1, Ordering::Relaxed);
            self.started.notify_one();
        } else if added {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    /// When the present spell of listening began, on the server's clock.
    pub fn active_since(&self) -> f64 {
        f64::from_bits(self.since.load(Ordering::Relaxed))
    }

    /// Resolves when someone starts listening (or has since the last
    /// call).
    pub async fn started(&self) {
        self.started.notified().await;
    }

    /// Unsubscribes the client from `name`; false if it was not.
    pub fn unsubscribe(&self, client_id: u64, kind: Kind, name: &[u8]) -> bool {
        let mut subscriptions = self.lock();
        let map = subscriptions.of(kind);
        let Some(subscribers) = map.get_mut(name) else {
            return false;
        };
        let removed = subscribers.remove(&client_id).is_some();
        if subscribers.is_empty() {
            map.remove(name);
        }
        if removed {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Delivers a message on `channel` to every subscriber of the channel
    /// and of every pattern that matches it; returns how many got it. The
    /// payload is made only if someone is to get it: most events match
    /// nobody's pattern when subscribers watch a few runs.
    pub fn publish(&self, channel: &[u8], payload: impl Fn() -> Bytes) -> usize {
        if !self.active() {
            return 0;
        }
        let subscriptions = self.lock();
        let mut made = None;
        let mut payload = || made.get_or_insert_with(&payload).clone();
        let mut delivered = 0;
        if let Some(subscribers) = subscriptions.channels.get(channel) {
            let message = Message::on_channel(channel, &payload());
            for sender in subscribers.values() {
                delivered += usize::from(sender.send(message.clone()).is_ok());
            }
        }
        for (pattern, subscribers) in &subscriptions.patterns {
            if !glob::matches(pattern, channel, false) {
                continue;
            }
            let message = Message::on_pattern(pattern, channel, &payload());
            for sender in subscribers.values() {
                delivered += usize::from(sender.send(message.clone()).is_ok());
            }
        }
        delivered
    }

    /// `PUBSUB CHANNELS [pattern]`: the channels with a subscriber.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let subscriptions = self.lock();
        let mut names: Vec<Bytes> = (subscriptions.channels.keys())
            .filter(|name| pattern.is_none_or(|pattern| glob::matches(pattern, name, false)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// `PUBSUB NUMSUB`: the subscribers of a channel (patterns not counted).
    pub fn subscribers(&self, channel: &[u8]) -> usize {
        self.lock().channels.get(channel).map_or(0, BTreeMap::len)
    }

    /// `PUBSUB NUMPAT` and INFO's `pubsub_patterns`: patterns subscribed
    /// to, each once whoever subscribes.
    pub fn pattern_count(&self) -> usize {
        self.lock().patterns.len()
    }

    /// INFO's `pubsub_channels`: channels with a subscriber.
    pub fn channel_count(&self) -> usize {
        self.lock().channels.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscriptions> {
        // Maps only change whole: a panic elsewhere leaves them consistent.
        self.subscriptions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Subscriptions {
    fn of(&mut self, kind: Kind) -> &mut HashMap<Bytes, BTreeMap<u64, UnboundedSender<Message>>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn encoded(message: &Message, protocol: Protocol) -> String {
        let mut out = BytesMut::new();
        message.encode(protocol, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn messages_reach_channel_and_pattern_subscribers_once_each() {
        let pubsub = PubSub::default();
        assert!(!pubsub.active());
        let mut a = Inbox::new(1);
        let mut b = Inbox::new(2);
        assert!(pubsub.subscribe(&a, Kind::Channel, &name("__lease__:run-1"), 5.0));
        assert!(!pubsub.subscribe(&a, Kind::Channel, &name("__lease__:run-1"), 6.0));
        assert!(pubsub.subscribe(&b, Kind::Pattern, &name("__lease__:*"), 7.0));
        assert!(pubsub.active());
        assert_eq!(pubsub.active_since(), 5.0);
        let delivered = pubsub.publish(b"__lease__:run-1", || name("acquired:1:w"));
        assert_eq!(delivered, 2);
        assert_eq!(
            encoded(&a.receiver.try_recv().unwrap(), Protocol::Resp2),
            "*3\r\n$7\r\nmessage\r\n$15\r\n__lease__:run-1\r\n$12\r\nacquired:1:w\r\n"
        );
        let pmessage = b.receiver.try_recv().unwrap();
        assert_eq!(
            encoded(&pmessage, Protocol::Resp2),
            "*4\r\n$8\r\npmessage\r\n$11\r\n__lease__:*\r\n\
             $15\r\n__lease__:run-1\r\n$12\r\nacquired:1:w\r\n"
        );
        assert_eq!(
            encoded(&pmessage, Protocol::Resp3),
            ">4\r\n$8\r\npmessage\r\n$11\r\n__lease__:*\r\n\
             $15\r\n__lease__:run-1\r\n$12\r\nacquired:1:w\r\n"
        );
        let unwanted = || unreachable!("nobody gets it, so it is not made");
        assert_eq!(pubsub.publish(b"__leaseevent__:acquired", unwanted), 0);
        assert_eq!(pubsub.channels(None), [name("__lease__:run-1")]);
        assert_eq!(pubsub.channels(Some(b"x*")), Vec::<Bytes>::new());
        assert_eq!(pubsub.subscribers(b"__lease__:run-1"), 1);
        assert_eq!(pubsub.pattern_count(), 1);
        assert!(pubsub.unsubscribe(1, Kind::Channel, b"__lease__:run-1"));
        assert!(!pubsub.unsubscribe(1, Kind::Channel, b"__lease__:run-1"));
        assert!(pubsub.unsubscribe(2, Kind::Pattern, b"__lease__:*"));
        assert!(!pubsub.active());
        assert_eq!(pubsub.channel_count(), 0);
    }
}
