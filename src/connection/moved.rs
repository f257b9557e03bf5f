//! `cluster-redirect moved` at the connection: a follower answers a
//! request that names a key with `-MOVED <slot> <leader>` (or
//! `-CLUSTERDOWN` while no leader is known) before parsing it, as a Redis
//! Cluster node answers for a slot it does not serve; the decision itself
//! is `crate::cluster::redirect`'s. Keyless requests run here as in
//! `proxy` mode.
//!
//! Inside `MULTI` the redirect is the queued request's reply and aborts
//! the transaction (`EXECABORT`), as Redis does; `EXEC` itself is
//! redirected, discarding the transaction, if leadership moved away
//! between queuing and `EXEC` (Redis checks the queued commands' slots at
//! `EXEC` too).

use bytes::Bytes;

use super::Connection;
use crate::cluster::redirect;
use crate::command::{self, CommandName};
use crate::reply::Reply;

impl<S> Connection<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    /// The redirect for a request of command `name`, when `moved` is on
    /// (`cluster-redirect moved` in a cluster) and this node does not lead.
    pub(super) fn redirected(
        &self,
        moved: bool,
        name: CommandName,
        args: &[Bytes],
    ) -> Option<Reply> {
        if !moved {
            return None;
        }
        let key = name.first_key(args)?;
        let status = self.shared.cluster()?;
        redirect::redirect(&status, key).map(Reply::error)
    }

    /// The redirect for `EXEC`: the first queued request that would be
    /// redirected now.
    pub(super) fn redirected_exec(&self, moved: bool, queued: &[Vec<Bytes>]) -> Option<Reply> {
        queued.iter().find_map(|args| {
            let name = command::check(args).ok()?;
            self.redirected(moved, name, args)
        })
    }
}
