//! The end of a turn: the final version of the reply as a pure function of what came
//! ([`final_reply`]), and the agent's steps around it (the files, the conversation, the
//! next turn).

use std::collections::HashSet;
use std::path::PathBuf;

use hermes_mobile::upstream::openai::take_data_images;
use hermes_mobile::upstream::{media_path_allowed, take_media_tags};
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{AgentCommand, DeviceId, OutgoingFile};

use super::sentences as say;
use super::turn::TurnPhase;
use super::{capitalize, HttpAgent, Load, MAX_MEDIA_PER_REPLY, MAX_REPLY_BYTES, MEDIA_LIMIT};

/// What a turn ends with, as the stream left it.
pub(super) struct Ending<'a> {
    /// What was streamed; when it is blank, `output` (a whole answer) is used.
    pub streamed: &'a str,
    pub output: Option<String>,
    pub complete: bool,
    pub stopping: bool,
    pub length_cut: bool,
    /// Why the answer is not whole, when that is known.
    pub problem: Option<&'a str>,
    pub media_dirs: &'a [String],
}

/// The final version of a reply and what goes with it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FinalReply {
    /// What the phone sees.
    pub text: String,
    /// What the model said, without the gateway's notes and the files' tags: the
    /// conversation keeps this, and nothing when it is blank.
    pub model_text: String,
    /// Data-URL images, as MIME type and bytes.
    pub images: Vec<(String, Vec<u8>)>,
    /// `MEDIA:` paths inside the media folders, to read and send.
    pub files: Vec<String>,
}

/// The final text of a reply, its files and its notes. Pure: the same ending always gives
/// the same reply.
pub(super) fn final_reply(ending: Ending<'_>) -> FinalReply {
    let mut raw = ending.streamed.to_owned();
    if raw.trim().is_empty() {
        raw = ending.output.unwrap_or_default();
    }
    let mut notes = Vec::new();
    if raw.len() > MAX_REPLY_BYTES {
        // A whole output (run.completed, a non-streamed answer) has the same bound.
        let mut end = MAX_REPLY_BYTES;
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        raw.truncate(end);
        notes.push(format!("({})", say::reply_too_long(MAX_REPLY_BYTES / 1024)));
    }
    let (text, paths) = take_media_tags(&raw);
    let (model_text, images) = take_data_images(&text);
    let files = allowed_files(paths, ending.media_dirs, &mut notes);
    if ending.length_cut {
        notes.push(say::LENGTH_LIMIT.into());
    }
    let empty = model_text.trim().is_empty();
    let problem = ending
        .problem
        .map(str::to_owned)
        .or_else(|| (!ending.complete).then(|| say::STREAM_INCOMPLETE.into()));
    let mut text = if ending.stopping {
        if empty {
            say::STOPPED.into()
        } else {
            format!("{model_text}\n\n{}", say::STOPPED_MARK)
        }
    } else if let Some(why) = problem {
        let why = capitalize(&why);
        if empty {
            format!("⚠ {why}")
        } else {
            format!("{model_text}\n\n⚠ {why}")
        }
    } else if empty {
        let names: Vec<&str> = files.iter().map(|p| p.rsplit('/').next().unwrap_or(p)).collect();
        match (names.is_empty(), images.is_empty()) {
            (false, _) => say::sent_files(&names),
            (true, false) => say::SENT_AN_IMAGE.into(),
            (true, true) => say::EMPTY_ANSWER.into(),
        }
    } else {
        model_text.clone()
    };
    for note in notes {
        text.push_str("\n\n");
        text.push_str(&note);
    }
    let model_text = if empty { String::new() } else { model_text };
    FinalReply {
        text,
        model_text,
        images,
        files,
    }
}

/// Each path once, a few per reply, and only inside the media folders: every file is a
/// read on the one file worker that every phone's uploads also wait for.
fn allowed_files(mut paths: Vec<String>, media_dirs: &[String], notes: &mut Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    if paths.len() > MAX_MEDIA_PER_REPLY {
        notes.push(say::more_files(paths.len() - MAX_MEDIA_PER_REPLY, MAX_MEDIA_PER_REPLY));
        paths.truncate(MAX_MEDIA_PER_REPLY);
    }
    let mut allowed = Vec::new();
    for path in paths {
        if media_path_allowed(&path, media_dirs) {
            allowed.push(path);
        } else {
            log::info!("agent: MEDIA:{:?} not sent: not in MOBILE_AGENT_MEDIA_DIRS", path);
            notes.push(say::outside_media_dirs(&path));
        }
    }
    allowed
}

impl HttpAgent {
    /// The turn ends with one sentence (after what was shown, if anything).
    pub(super) fn fail_turn(&mut self, device: &DeviceId, sentence: String) {
        let Some(turn) = self.turn_mut(device) else { return };
        turn.complete = true;
        let text = if turn.shown {
            format!("{}\n\n⚠ {sentence}", turn.coalescer.text())
        } else {
            sentence
        };
        let message = turn.message.clone();
        self.reply(device, message, text, true);
        self.close_turn(device, Vec::new());
    }

    /// The stream is over, whole or not: the final version, its files, the conversation.
    pub(super) fn end_stream(&mut self, device: &DeviceId, problem: Option<&str>) {
        let media_dirs = self.settings.media_dirs.clone();
        let Some(turn) = self.turn_mut(device) else { return };
        if turn.finishing() {
            return;
        }
        // The call, if one is still open, is dropped by `close_turn` below.
        let reply = final_reply(Ending {
            streamed: turn.coalescer.text(),
            output: turn.output.take(),
            complete: turn.complete,
            stopping: turn.stopping(),
            length_cut: turn.length_cut,
            problem,
            media_dirs: &media_dirs,
        });
        let user_text = turn.input.history.clone();
        let message = turn.message.clone();
        // The final version always goes, also when it equals the last edit (M2: `done`).
        self.reply(device, message, reply.text, true);
        for (mime, data) in reply.images {
            let ext = mime.rsplit('/').next().unwrap_or("img").to_owned();
            self.out.push_back(AgentCommand::SendFile {
                device: device.clone(),
                file: OutgoingFile {
                    kind: DownloadKind::Image,
                    mime,
                    filename: format!("image.{ext}"),
                    caption: None,
                    data,
                    reply_to: None,
                },
            });
        }
        // The conversation keeps what the model said, not the gateway's notes.
        if !reply.model_text.is_empty() {
            if let Some(d) = self.devices.get_mut(device) {
                d.history.push("user", &user_text);
                d.history.push("assistant", &reply.model_text);
            }
            self.persist(device);
        }
        self.close_turn(device, reply.files);
    }

    /// The turn is over once its files are read, then the next one may start.
    pub(super) fn close_turn(&mut self, device: &DeviceId, paths: Vec<String>) {
        let Some(turn) = self.devices.get_mut(device).and_then(|d| d.turn.as_mut()) else {
            return;
        };
        if let Some(call) = turn.call().filter(|c| self.calls.remove(c).is_some()) {
            self.io.push_back(crate::agent::io::AgentIo::Cancel(call));
        }
        // Its final reply is out (the answer, or why there is none): the message is done
        // with (L64). Its files are still to be read: a crash now loses them rather than
        // answering the message twice.
        self.handed.extend(turn.input.owed.take());
        // The reply itself counts as one (done just below), each file as one more.
        turn.phase = TurnPhase::Finishing { left: paths.len() + 1 };
        for path in paths {
            let what = Load::Media {
                device: device.clone(),
                path: path.clone(),
            };
            self.load(what, PathBuf::from(path), MEDIA_LIMIT);
        }
        self.part_done(device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(streamed: &str) -> Ending<'_> {
        Ending {
            streamed,
            output: None,
            complete: true,
            stopping: false,
            length_cut: false,
            problem: None,
            media_dirs: &[],
        }
    }

    #[test]
    fn a_whole_answer_is_itself() {
        let reply = final_reply(ending("Hello."));
        assert_eq!((reply.text.as_str(), reply.model_text.as_str()), ("Hello.", "Hello."));
    }

    #[test]
    fn a_cut_answer_keeps_its_text_and_says_why() {
        let reply = final_reply(Ending {
            complete: false,
            ..ending("Once upon")
        });
        assert_eq!(
            reply.text,
            "Once upon\n\n⚠ Interrupted: the stream ended before the answer was complete"
        );
        assert_eq!(
            reply.model_text, "Once upon",
            "the conversation keeps what the model said"
        );
    }

    #[test]
    fn a_stopped_answer_is_marked_and_an_empty_one_says_stopped() {
        let stopped = |s| {
            final_reply(Ending {
                stopping: true,
                ..ending(s)
            })
            .text
        };
        assert_eq!(stopped("1, 2"), "1, 2\n\n(stopped)");
        assert_eq!(stopped(" "), "Stopped.");
    }

    #[test]
    fn files_outside_the_media_folders_are_named_not_sent() {
        let dirs = ["/srv/media".to_owned()];
        let reply = final_reply(Ending {
            media_dirs: &dirs,
            ..ending("MEDIA:/srv/media/a.png\nMEDIA:/etc/passwd")
        });
        assert_eq!(reply.files, vec!["/srv/media/a.png".to_owned()]);
        assert_eq!(
            reply.text,
            "(sent a.png)\n\n(The file /etc/passwd was not sent: it is outside MOBILE_AGENT_MEDIA_DIRS.)"
        );
        assert_eq!(reply.model_text, "", "nothing for the conversation");
    }

    #[test]
    fn a_blank_stream_uses_the_whole_output() {
        let reply = final_reply(Ending {
            output: Some("From run.completed".into()),
            ..ending("")
        });
        assert_eq!(reply.text, "From run.completed");
    }
}
