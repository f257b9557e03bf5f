//! Parsing of the publish/subscribe commands: `SUBSCRIBE`, `PSUBSCRIBE`,
//! `UNSUBSCRIBE`, `PUNSUBSCRIBE` and `PUBSUB`. There is no `PUBLISH`:
//! only the server publishes (lease events), so nobody can forge one.

use super::args::Args;
use super::{Command, help};
use crate::pubsub::Kind;
use crate::reply::Reply;

pub fn parse_subscribe(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Subscribe(Kind::Channel, args.take_rest()))
}

pub fn parse_psubscribe(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Subscribe(Kind::Pattern, args.take_rest()))
}

pub fn parse_unsubscribe(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Unsubscribe(Kind::Channel, args.take_rest()))
}

pub fn parse_punsubscribe(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Unsubscribe(Kind::Pattern, args.take_rest()))
}

/// `PUBSUB CHANNELS [pattern]`
pub fn parse_pubsub_channels(args: &mut Args) -> Result<Command, Reply> {
    let pattern = args.next();
    args.finish("pubsub|channels")?;
    Ok(Command::PubsubChannels(pattern))
}

/// `PUBSUB NUMSUB [channel ...]`
pub fn parse_pubsub_numsub(args: &mut Args) -> Result<Command, Reply> {
    Ok(Command::PubsubNumsub(args.take_rest()))
}

pub fn parse_pubsub_numpat(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::PubsubNumpat)
}

pub fn parse_pubsub_help(_: &mut Args) -> Result<Command, Reply> {
    Ok(Command::Help(help::PUBSUB_HELP))
}
