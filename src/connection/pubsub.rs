//! A connection's subscriptions to lease events, and their messages.
//!
//! As in Redis 7: `SUBSCRIBE` and `PSUBSCRIBE` answer once per name with
//! `[subscribe|psubscribe, name, count]`, the unsubscribes likewise (with
//! a null name when there was nothing to leave), `count` being the
//! connection's channels and patterns together. Messages arrive as
//! `[message, channel, payload]` and `[pmessage, pattern, channel,
//! payload]`: pushes in RESP3, arrays in RESP2.
//!
//! While a RESP2 client is subscribed, only the (un)subscribe commands,
//! `PING`, `QUIT` and `RESET` run (the handlers ask
//! [`Connection::refused_while_subscribed`]). Subscribed clients are of the
//! `pubsub` type: their own output limit, exempt from `timeout`.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::Connection;
use crate::command::CommandName;
use crate::pubsub::{Inbox, Kind, Message};
use crate::reply::{Protocol, Reply};

/// A connection that has subscribed: its queue of messages and what it is
/// subscribed to.
pub(super) struct Subscriber {
    inbox: Inbox,
    channels: BTreeSet<Bytes>,
    patterns: BTreeSet<Bytes>,
}

impl Subscriber {
    fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    fn names(&mut self, kind: Kind) -> &mut BTreeSet<Bytes> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }

    /// The next message for the client.
    pub(super) async fn next(&mut self) -> Option<Message> {
        self.inbox.receiver.recv().await
    }

    /// A message already waiting, if any.
    pub(super) fn try_next(&mut self) -> Option<Message> {
        self.inbox.receiver.try_recv().ok()
    }
}

impl<S> Connection<S> {
    /// Whether the client is subscribed to anything.
    pub(super) fn subscribed(&self) -> bool {
        self.subscriber.as_ref().is_some_and(|s| s.count() > 0)
    }

    /// Redis's refusal of a command a RESP2 subscriber may not run.
    pub(super) fn refused_while_subscribed(&self, name: CommandName) -> Option<Reply> {
        let refused = self.session.protocol == Protocol::Resp2
            && self.subscribed()
            && !name.allowed_while_subscribed();
        refused.then(|| {
            Reply::error(format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
                 QUIT / RESET are allowed in this context"
            ))
        })
    }

    /// `SUBSCRIBE` / `PSUBSCRIBE`.
    pub(super) fn subscribe(&mut self, kind: Kind, names: Vec<Bytes>) -> Reply {
        let client_id = self.client.id;
        let subscriber = self.subscriber.get_or_insert_with(|| Subscriber {
            inbox: Inbox::new(client_id),
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
        });
        let now = self.shared.clock.now();
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            if subscriber.names(kind).insert(name.clone()) {
                self.shared
                    .pubsub
                    .subscribe(&subscriber.inbox, kind, &name, now);
            }
            replies.push(notice(kind, true, Some(name), subscriber.count()));
        }
        self.report_subscriptions();
        Reply::Replies(replies)
    }

    /// `UNSUBSCRIBE` / `PUNSUBSCRIBE`: the names given, or all of them.
    pub(super) fn unsubscribe(&mut self, kind: Kind, names: Vec<Bytes>) -> Reply {
        let names = match (&mut self.subscriber, names.is_empty()) {
            (Some(subscriber), true) => subscriber.names(kind).iter().cloned().collect(),
            (_, _) => names,
        };
        if names.is_empty() {
            let count = self.subscriber.as_ref().map_or(0, Subscriber::count);
            return notice(kind, false, None, count);
        }
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            let count = match &mut self.subscriber {
                Some(subscriber) => {
                    if subscriber.names(kind).remove(&name) {
                        self.shared.pubsub.unsubscribe(self.client.id, kind, &name);
                    }
                    subscriber.count()
                }
                None => 0,
            };
            replies.push(notice(kind, false, Some(name), count));
        }
        self.report_subscriptions();
        Reply::Replies(replies)
    }

    /// Leaves every channel and pattern without a word: `RESET`, and the
    /// connection's end.
    pub(super) fn unsubscribe_all(&mut self) {
        let Some(mut subscriber) = self.subscriber.take() else {
            return;
        };
        for kind in [Kind::Channel, Kind::Pattern] {
            for name in std::mem::take(subscriber.names(kind)) {
                self.shared.pubsub.unsubscribe(self.client.id, kind, &name);
            }
        }
        self.report_subscriptions();
    }

    /// `PING` while subscribed in RESP2: `["pong", message or ""]`.
    pub(super) fn subscribed_pong(&self, message: Option<Bytes>) -> Option<Reply> {
        (self.session.protocol == Protocol::Resp2 && self.subscribed()).then(|| {
            Reply::Array(vec![
                Reply::text("pong"),
                Reply::Bulk(message.unwrap_or_default()),
            ])
        })
    }

    /// Queues `message` and every other one waiting for the client.
    pub(super) fn take_messages(&mut self, subscriber: &mut Subscriber, message: Message) {
        let protocol = self.session.protocol;
        message.encode(protocol, &mut self.write_buf);
        while let Some(message) = subscriber.try_next() {
            message.encode(protocol, &mut self.write_buf);
        }
    }

    fn report_subscriptions(&self) {
        let mut meta = self.client.meta();
        let subscriber = self.subscriber.as_ref();
        meta.channels = subscriber.map_or(0, |s| s.channels.len());
        meta.patterns = subscriber.map_or(0, |s| s.patterns.len());
    }
}

/// `[subscribe|unsubscribe|psubscribe|punsubscribe, name or null, count]`.
fn notice(kind: Kind, subscribing: bool, name: Option<Bytes>, count: usize) -> Reply {
    let word = match (kind, subscribing) {
        (Kind::Channel, true) => "subscribe",
        (Kind::Channel, false) => "unsubscribe",
        (Kind::Pattern, true) => "psubscribe",
        (Kind::Pattern, false) => "punsubscribe",
    };
    Reply::Push(vec![
        Reply::text(word),
        name.map_or(Reply::Null, Reply::Bulk),
        Reply::Int(count as i64),
    ])
}
