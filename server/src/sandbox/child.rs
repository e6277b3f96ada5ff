//! The helper side: `rkllm-server --sandbox BYTES` bounds its own data
//! segment (heap and private mappings: `RLIMIT_DATA`) to `BYTES`, then
//! answers one JSON job a line on stdin with one JSON reply a line on
//! stdout, until stdin closes. An allocation over the bound ends the
//! process (Rust aborts when memory is refused); the server sees it end,
//! fails that one job and starts another helper when it needs one.

use std::io::{BufRead, BufReader, Read, Write};

use super::MAX_JOB_BYTES;
use super::job::{Job, Reply};

/// Runs the helper; returns the process's exit code.
pub fn serve(memory_bytes: u64) -> i32 {
    // The helper must not outlive the server.
    if let Err(err) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        eprintln!("rkllm-server sandbox: cannot ask to die with the server: {err}");
    }
    let limit = rustix::process::Rlimit {
        current: Some(memory_bytes),
        maximum: Some(memory_bytes),
    };
    if let Err(err) = rustix::process::setrlimit(rustix::process::Resource::Data, limit) {
        eprintln!("rkllm-server sandbox: cannot bound its memory: {err}");
        return 2;
    }
    // A panic is a failed job (caught in `Job::run`), not a message on
    // stderr, which the server reads only when a helper dies.
    std::panic::set_hook(Box::new(|_| {}));
    // Replies go to a private copy of stdout; stdout itself becomes stderr,
    // so that nothing else written there can garble a reply.
    let replies = match rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3)
        .and_then(|fd| rustix::stdio::dup2_stdout(std::io::stderr()).map(|()| fd))
    {
        Ok(fd) => std::fs::File::from(fd),
        Err(err) => {
            eprintln!("rkllm-server sandbox: cannot set up its pipes: {err}");
            return 2;
        }
    };
    run(std::io::stdin().lock(), replies)
}

/// Answers each job line of `jobs` with a reply line on `replies`.
fn run(jobs: impl Read, mut replies: impl Write) -> i32 {
    let mut jobs = BufReader::new(jobs);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut jobs)
            .take(MAX_JOB_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return 0,
            Ok(_) => {}
            Err(err) => {
                eprintln!("rkllm-server sandbox: cannot read a job: {err}");
                return 2;
            }
        }
        if line.last() != Some(&b'\n') {
            eprintln!("rkllm-server sandbox: a job longer than {MAX_JOB_BYTES} bytes");
            return 2;
        }
        let reply = match serde_json::from_slice::<Job>(&line) {
            Ok(job) => job.run(),
            Err(err) => Reply::Failed(format!("a job the helper cannot read: {err}")),
        };
        let mut out = serde_json::to_vec(&reply).unwrap_or_default();
        out.push(b'\n');
        if replies
            .write_all(&out)
            .and_then(|()| replies.flush())
            .is_err()
        {
            return 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JinjaTemplate;
    use crate::model::template::{RenderJob, TemplateMessage};

    #[test]
    fn each_job_line_gets_one_reply_line() {
        let job = Job::Render(RenderJob {
            template: JinjaTemplate {
                source: "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}".into(),
                bos_token: String::new(),
                eos_token: String::new(),
            },
            messages: vec![TemplateMessage {
                role: "user".into(),
                content: "hi".into(),
                tool_calls: Vec::new(),
            }],
            tools: None,
            enable_thinking: None,
            now_unix: 0,
            continue_final: false,
        });
        let mut input = serde_json::to_vec(&job).unwrap();
        input.extend_from_slice(b"\nnot json\n");
        let mut output = Vec::new();
        assert_eq!(run(&input[..], &mut output), 0);
        let replies: Vec<Reply> = output
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(replies.len(), 2);
        assert_eq!(replies[0], Reply::Rendered("<user>hi".into()));
        assert!(matches!(&replies[1], Reply::Failed(why) if why.contains("cannot read")));
    }
}
