//! An agent outside the process, over the agent link (docs/agent-protocol.md).
//!
//! This is the [`Agent`] the event loop drives when `MOBILE_AGENT` is `exec:` or `link`.
//! It stays sans-IO like the demo: the core's [`AgentLink`] decides, and what must touch
//! the world (a line for a peer, a peer to close, a file to read) comes out of
//! [`LinkAgent::poll_io`], in the port's words, for the server's transports and file
//! worker to carry out.

use std::collections::VecDeque;

use hermes_mobile::agent_link::{file_of, AgentLink, FileHandover, LinkCommand, LinkOutput, LinkRole, Origin, PeerId};
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::limits::MAX_MEDIA_BYTES;
use hermes_mobile::{Accepted, AgentCommand, AgentEvent, CommandError, Time};

use super::io::{AgentIo, LoadError, LoadTag, PeerInput};
use super::{PureAgent, Refused};

/// A command waiting for its file.
struct Loading {
    origin: Origin,
    command: AgentCommand,
    tag: LoadTag,
}

pub struct LinkAgent {
    link: AgentLink,
    io: VecDeque<AgentIo>,
    commands: VecDeque<(Origin, LinkCommand)>,
    /// The command handed to the core last, to answer its outcome.
    current: Option<Origin>,
    /// Outcomes of output held for an offline device, answered once the journal has it
    /// (issue 24): the agent's `ok` is a promise the gateway must be able to keep. In
    /// ticket order.
    after_commit: VecDeque<(u64, Origin, Accepted)>,
    /// While a file is read, later commands wait: the agent's order is kept.
    loading: Option<Loading>,
    next_load: LoadTag,
}

impl LinkAgent {
    pub fn new(link: AgentLink) -> LinkAgent {
        LinkAgent {
            link,
            io: VecDeque::new(),
            commands: VecDeque::new(),
            current: None,
            after_commit: VecDeque::new(),
            loading: None,
            next_load: 0,
        }
    }

    #[cfg(test)]
    fn link(&mut self) -> &mut AgentLink {
        &mut self.link
    }

    /// What a transport saw of a peer.
    pub fn handle_peer(&mut self, now: Time, input: PeerInput<'_>) {
        match input {
            PeerInput::Opened {
                peer,
                needs_token,
                source,
            } => self.link.handle_peer_open_from(peer, needs_token, source),
            PeerInput::Line { peer, line } => self.link.handle_line(now, peer, line),
            PeerInput::TooBig { peer } => self.link.handle_too_big(peer),
            PeerInput::Closed { peer } => self.link.handle_peer_closed(now, peer),
        }
    }

    /// Owed events whose lines never reached the agent (before its end).
    pub fn handle_unwritten(&mut self, keys: &[EventKey]) {
        self.link.handle_unwritten(keys);
    }

    /// A core event, with where its file was saved (or why it was not).
    pub fn handle_saved_event(&mut self, now: Time, event: AgentEvent, file: Option<FileHandover>) {
        self.link.handle_event(now, event, file);
    }

    pub fn is_attached(&self) -> bool {
        self.link.is_attached()
    }

    /// Whether more lines may be read now: not while a command waits for its file, so
    /// that lines behind it wait in the socket, not in memory.
    pub fn wants_lines(&mut self) -> bool {
        self.pull();
        self.loading.is_none()
            && !self
                .commands
                .iter()
                .any(|(_, c)| matches!(c, LinkCommand::NeedsFile { .. }))
    }

    pub fn role_of(&self, peer: PeerId) -> Option<LinkRole> {
        self.link.role_of(peer)
    }

    /// Sorts what the link decided into work for the server and commands for the core.
    fn pull(&mut self) {
        while let Some(out) = self.link.poll_output() {
            match out {
                LinkOutput::Write { peer, line, owed } => self.io.push_back(AgentIo::Write { peer, line, owed }),
                LinkOutput::Close { peer, reason } => self.io.push_back(AgentIo::Close { peer, reason }),
                LinkOutput::Command { origin, command } => self.commands.push_back((origin, *command)),
                LinkOutput::Handed(key) => self.io.push_back(AgentIo::Handed(key)),
            }
        }
    }

    pub fn poll_io(&mut self) -> Option<AgentIo> {
        self.pull();
        self.io.pop_front()
    }

    /// A file read finished. Its command goes to the core next, or the agent hears why not.
    pub fn handle_loaded(&mut self, tag: LoadTag, result: Result<Vec<u8>, LoadError>) {
        let Some(loading) = self.loading.take_if(|l| l.tag == tag) else {
            return;
        };
        let Loading {
            origin, mut command, ..
        } = loading;
        match result {
            Ok(data) => {
                if let Some(file) = file_of(&mut command) {
                    file.data = data;
                }
                self.commands.push_front((origin, LinkCommand::Ready(command)));
            }
            Err(LoadError::TooBig) => {
                self.link
                    .handle_file_error(&origin, "file_too_big", "file is over 8 MiB".into());
            }
            Err(LoadError::Unreadable(why)) => self.link.handle_file_error(&origin, "file_unreadable", why),
        }
    }
}

impl PureAgent for LinkAgent {
    fn handle_event(&mut self, now: Time, event: AgentEvent) {
        self.link.handle_event(now, event, None);
    }

    /// The link has no clock of its own: queued events age by the times of later events.
    fn handle_timeout(&mut self, _now: Time) {}

    fn poll_command(&mut self) -> Option<AgentCommand> {
        if self.loading.is_some() {
            return None;
        }
        self.pull();
        match self.commands.pop_front()? {
            (origin, LinkCommand::Ready(command)) => {
                self.current = Some(origin);
                Some(command)
            }
            (origin, LinkCommand::NeedsFile { command, path }) => {
                self.next_load += 1;
                let tag = self.next_load;
                self.loading = Some(Loading { origin, command, tag });
                self.io.push_back(AgentIo::Load {
                    tag,
                    path,
                    limit: MAX_MEDIA_BYTES,
                });
                None
            }
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        None
    }

    fn handle_accepted(&mut self, _now: Time, accepted: &Accepted) {
        let Some(origin) = self.current.take() else { return };
        match accepted {
            Accepted::Kept { ticket, then } => {
                // In ticket order: a repeated `deliver` waits for the first one's (lower)
                // ticket, not for output kept after it (S4).
                let at = self.after_commit.partition_point(|(t, _, _)| t <= ticket);
                self.after_commit.insert(at, (*ticket, origin, (**then).clone()));
            }
            accepted => self.link.handle_outcome(&origin, Ok(accepted)),
        }
    }

    fn handle_committed(&mut self, _now: Time, ticket: u64, kept: bool) {
        while self.after_commit.front().is_some_and(|(t, _, _)| *t <= ticket) {
            let Some((_, origin, accepted)) = self.after_commit.pop_front() else {
                break;
            };
            match kept {
                true => self.link.handle_outcome(&origin, Ok(&accepted)),
                false => self.link.handle_outcome(&origin, Err(&CommandError::NotKept)),
            }
        }
    }

    fn handle_refused(&mut self, _now: Time, _what: Refused, error: &CommandError) {
        if let Some(origin) = self.current.take() {
            self.link.handle_outcome(&origin, Err(error));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_mobile::agent_link::QueueLimits;

    fn attached() -> LinkAgent {
        let mut agent = LinkAgent::new(AgentLink::new("gw", 300, None, QueueLimits::default()));
        agent.link().handle_peer_open(PeerId(1), false);
        agent
            .link()
            .handle_line(Time::ZERO, PeerId(1), br#"{"t":"hello","v":1}"#);
        while agent.poll_io().is_some() {}
        agent
    }

    #[test]
    fn a_command_behind_a_file_waits_for_it() {
        // Order is kept: the reply after send_file goes to the core after the file.
        let mut agent = attached();
        let line = br#"{"t":"send_file","ref":"f","device":"tel-1","kind":"image","name":"a.png","path":"/tmp/a.png"}"#;
        agent.link().handle_line(Time::ZERO, PeerId(1), line);
        agent.link().handle_line(
            Time::ZERO,
            PeerId(1),
            br#"{"t":"reply","device":"tel-1","id":"a","text":"x"}"#,
        );
        assert_eq!(agent.poll_command(), None);
        let tag = match agent.poll_io() {
            Some(AgentIo::Load { tag, path, limit }) => {
                assert_eq!((path, limit), ("/tmp/a.png".into(), MAX_MEDIA_BYTES));
                tag
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(agent.poll_command(), None, "the reply waits");
        agent.handle_loaded(tag + 1, Ok(b"other".to_vec()));
        assert_eq!(agent.poll_command(), None, "another read's answer is not this one's");
        agent.handle_loaded(tag, Ok(b"PNG".to_vec()));
        match agent.poll_command() {
            Some(AgentCommand::SendFile { file, .. }) => assert_eq!(file.data, b"PNG"),
            other => panic!("{other:?}"),
        }
        agent.handle_accepted(Time::ZERO, &Accepted::Done);
        assert!(matches!(agent.poll_command(), Some(AgentCommand::Reply { .. })));
        match agent.poll_io() {
            Some(AgentIo::Write { line, .. }) => assert_eq!(line, "{\"t\":\"ok\",\"ref\":\"f\"}\n"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unreadable_file_is_answered_and_the_next_command_goes_on() {
        let mut agent = attached();
        let line = br#"{"t":"send_file","ref":"f","device":"tel-1","kind":"image","name":"a.png","path":"/nope"}"#;
        agent.link().handle_line(Time::ZERO, PeerId(1), line);
        agent
            .link()
            .handle_line(Time::ZERO, PeerId(1), br#"{"t":"typing","device":"tel-1"}"#);
        assert_eq!(agent.poll_command(), None);
        let Some(AgentIo::Load { tag, .. }) = agent.poll_io() else {
            panic!("the file is read first")
        };
        agent.handle_loaded(tag, Err(LoadError::Unreadable("/nope: missing".into())));
        assert!(matches!(agent.poll_command(), Some(AgentCommand::Typing { .. })));
        match agent.poll_io() {
            Some(AgentIo::Write { line, .. }) => assert!(line.contains("\"code\":\"file_unreadable\""), "{line}"),
            other => panic!("{other:?}"),
        }
    }
}
