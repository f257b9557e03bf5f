//! A client's session: the protocol it speaks, whether it has
//! authenticated, and what it said about itself. Plain state and the rules
//! of AUTH, HELLO, CLIENT SETNAME|SETINFO and RESET, with no socket, so
//! unit tests drive it directly.

use bytes::Bytes;
use subtle::ConstantTimeEq;

use crate::command::ClientAttr;
use crate::reply::{Protocol, Reply};

#[derive(Debug)]
pub struct Session {
    pub protocol: Protocol,
    /// Whether the client may run commands: always without `requirepass`.
    pub authenticated: bool,
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
}

/// The reply to any command but those allowed before AUTH.
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// Redis's reply to HELLO without AUTH before authenticating.
const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, \
     otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate \
     the client and select the RESP protocol version at the same time";

impl Session {
    /// A new connection's session, given the `requirepass` in force.
    pub fn new(requirepass: &str) -> Session {
        Session {
            protocol: Protocol::Resp2,
            authenticated: requirepass.is_empty(),
            name: None,
            lib_name: None,
            lib_ver: None,
        }
    }

    /// `AUTH`, as Redis does it with only the `default` user: without
    /// `requirepass` any password of `default` is accepted, with it the
    /// password must match, compared in constant time.
    pub fn auth(
        &mut self,
        requirepass: &str,
        username: Option<&[u8]>,
        password: &[u8],
    ) -> Result<(), Reply> {
        let required = requirepass.as_bytes();
        if required.is_empty() && username.is_none() {
            return Err(Reply::error(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ));
        }
        let user_ok = username.is_none_or(|user| user == b"default");
        let password_ok = required.is_empty() || bool::from(required.ct_eq(password));
        if user_ok && password_ok {
            self.authenticated = true;
            Ok(())
        } else {
            Err(Reply::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ))
        }
    }

    /// `HELLO`: checks AUTH and SETNAME before changing anything, then
    /// switches protocol. The caller replies with the server's map, in the
    /// new protocol.
    pub fn hello(
        &mut self,
        requirepass: &str,
        protocol: Option<Protocol>,
        credentials: Option<(Bytes, Bytes)>,
        set_name: Option<Bytes>,
    ) -> Result<(), Reply> {
        match &credentials {
            Some((username, password)) => self.auth(requirepass, Some(username), password)?,
            None if !self.authenticated => return Err(Reply::error(HELLO_NOAUTH)),
            None => {}
        }
        if let Some(name) = set_name {
            self.set_name(name)?;
        }
        if let Some(protocol) = protocol {
            self.protocol = protocol;
        }
        Ok(())
    }

    /// `CLIENT SETNAME`; the empty name removes it.
    pub fn set_name(&mut self, name: Bytes) -> Result<(), Reply> {
        if !is_printable_word(&name) {
            return Err(Reply::error(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = (!name.is_empty()).then_some(name);
        Ok(())
    }

    /// `CLIENT SETINFO LIB-NAME|LIB-VER value`.
    pub fn set_info(&mut self, attr: ClientAttr, value: Bytes) -> Result<(), Reply> {
        let label = match attr {
            ClientAttr::LibName => "lib-name",
            ClientAttr::LibVer => "lib-ver",
        };
        if !is_printable_word(&value) {
            return Err(Reply::error(format!(
                "ERR {label} cannot contain spaces, newlines or special characters."
            )));
        }
        let value = (!value.is_empty()).then_some(value);
        match attr {
            ClientAttr::LibName => self.lib_name = value,
            ClientAttr::LibVer => self.lib_ver = value,
        }
        Ok(())
    }

    /// `RESET`: RESP2, no name, and logged out again if a password is
    /// required. The library info stays, as in Redis.
    pub fn reset(&mut self, requirepass: &str) {
        self.protocol = Protocol::Resp2;
        self.authenticated = requirepass.is_empty();
        self.name = None;
    }
}

/// Redis's rule for client names and library info: printable ASCII
/// without spaces.
fn is_printable_word(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn error(reply: Result<(), Reply>) -> String {
        match reply {
            Err(Reply::Error(message)) => message,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn without_a_password_a_session_starts_authenticated() {
        let mut session = Session::new("");
        assert!(session.authenticated);
        assert!(error(session.auth("", None, b"x")).starts_with("ERR AUTH <password> called"));
        // AUTH default <anything> is accepted, as Redis does.
        assert_eq!(session.auth("", Some(b"default"), b"x"), Ok(()));
        assert!(error(session.auth("", Some(b"other"), b"x")).starts_with("WRONGPASS"));
    }

    #[test]
    fn with_a_password_only_the_right_one_authenticates() {
        let mut session = Session::new("secret");
        assert!(!session.authenticated);
        assert!(error(session.auth("secret", None, b"wrong")).starts_with("WRONGPASS"));
        assert!(!session.authenticated);
        assert_eq!(session.auth("secret", Some(b"default"), b"secret"), Ok(()));
        assert!(session.authenticated);
        // RESET logs out again; a password rotated meanwhile is the one asked.
        session.reset("rotated");
        assert!(!session.authenticated);
        assert!(error(session.auth("rotated", None, b"secret")).starts_with("WRONGPASS"));
        assert_eq!(session.auth("rotated", None, b"rotated"), Ok(()));
    }

    #[test]
    fn hello_checks_everything_before_changing_anything() {
        let mut session = Session::new("pw");
        let refused = session.hello("pw", Some(Protocol::Resp3), None, None);
        assert!(error(refused).starts_with("NOAUTH HELLO must be called"));
        let wrong = Some((bytes("default"), bytes("nope")));
        assert!(
            error(session.hello("pw", Some(Protocol::Resp3), wrong, None)).starts_with("WRONGPASS")
        );
        assert_eq!(session.protocol, Protocol::Resp2);
        let right = Some((bytes("default"), bytes("pw")));
        let bad_name = Some(bytes("a b"));
        assert!(
            error(session.hello("pw", Some(Protocol::Resp3), right.clone(), bad_name))
                .starts_with("ERR Client names")
        );
        assert_eq!(session.protocol, Protocol::Resp2);
        let name = Some(bytes("worker-1"));
        assert_eq!(
            session.hello("pw", Some(Protocol::Resp3), right, name),
            Ok(())
        );
        assert_eq!(session.protocol, Protocol::Resp3);
        assert_eq!(session.name, Some(bytes("worker-1")));
        session.reset("pw");
        assert_eq!(
            (session.protocol, session.name.clone()),
            (Protocol::Resp2, None)
        );
    }

    #[test]
    fn names_and_library_info_are_printable_words() {
        let mut session = Session::new("");
        assert_eq!(session.set_name(bytes("w-1")), Ok(()));
        assert_eq!(session.set_name(bytes("")), Ok(()));
        assert_eq!(session.name, None);
        assert!(error(session.set_name(bytes("a\nb"))).contains("Client names"));
        assert_eq!(
            session.set_info(ClientAttr::LibName, bytes("redis-py")),
            Ok(())
        );
        assert!(
            error(session.set_info(ClientAttr::LibVer, bytes("5 3"))).starts_with("ERR lib-ver")
        );
        assert_eq!(session.lib_name, Some(bytes("redis-py")));
    }
}
