//! The lines of the containers' `HELP` subcommands, in Redis's layout: a
//! usage line, then each subcommand and an indented line saying what it
//! does.

pub const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Close the connection made from <ip:port>.",
    "KILL <filter> <value> [<filter> <value> ...]",
    "    Close every connection that matches all the filters:",
    "    * ID <client-id>: the connection with that id",
    "    * ADDR <ip:port>: the connection made from that address",
    "    * LADDR <ip:port>: connections made to that local address",
    "    * TYPE <NORMAL|MASTER|REPLICA|PUBSUB>: connections of that type (PUBSUB: subscribed)",
    "    * USER <username>: the only user is default",
    "    * SKIPME <YES|NO>: spare this connection (default: YES)",
    "    * MAXAGE <seconds>: connections older than that",
    "LIST [TYPE <normal|master|replica|pubsub>] [ID <id> [<id> ...]]",
    "    Return information about client connections.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set client library name or version for the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client (a LEASE.ACQUIRE ... BLOCK).",
    "HELP",
    "    Print this help.",
];

pub const COMMAND_HELP: &[&str] = &[
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all commands.",
    "COUNT",
    "    Return the total number of commands in this server.",
    "LIST",
    "    Return a list of all commands in this server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple commands.",
    "    If no command names are given, details for all commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple commands.",
    "    If no command names are given, documentation for all commands is returned.",
    "HELP",
    "    Print this help.",
];

pub const SLOWLOG_HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    The newest <count> entries, newest first (default 10; -1 for all). Each is",
    "    [id, unix time, microseconds, [arguments], client ip:port, client name].",
    "LEN",
    "    The number of entries.",
    "RESET",
    "    Empty the slow log.",
    "HELP",
    "    Print this help.",
];

pub const CONFIG_HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value> [<directive> <value> ...]",
    "    Set the configuration <directive> to <value>, all or none of them.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file with the running values.",
    "HELP",
    "    Print this help.",
];

pub const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "HELP",
    "    Print this help.",
];

pub const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "USAGE <key> [SAMPLES <count>]",
    "    Return the bytes the registry keeps for the lease of run <key>.",
    "    SAMPLES is accepted for compatibility: there is nothing to sample.",
    "HELP",
    "    Print this help.",
];

pub const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the encoding Redis would give the hash of run <key>'s lease.",
    "HELP",
    "    Print this help.",
];

pub const CLUSTER_HELP: &[&str] = &[
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ADDNODE <node-id> <host>:<port>[@<busport>]",
    "    Add a node (started with cluster-join yes) to the cluster: it catches up",
    "    from a snapshot as a learner, then becomes a voter. Any node sends it",
    "    to the leader; answers once the node votes. One change at a time.",
    "DELNODE <node-id>",
    "    Remove a node from the cluster (a dead one too), through any node;",
    "    removing the leader hands its lead to the most up-to-date voter first.",
    "INFO",
    "    Return information about the cluster: its state, and this node's role,",
    "    term, leader and log indexes.",
    "MYID",
    "    Return this node's id: its numeric id in 40 hex digits.",
    "NODES",
    "    Return the cluster's nodes in Redis's format: the leader is the master",
    "    of every slot, the others are its replicas.",
    "SLOTS",
    "    Return the slot ranges and the nodes that serve them: every slot, the",
    "    leader, then its replicas.",
    "SHARDS",
    "    Return the cluster's shards: one shard of every slot, its nodes the",
    "    leader (master) and the others (replicas).",
    "HELP",
    "    Print this help.",
];
