//! A runner's direct child process dies with the server, even when it is
//! a wrapper (`engine.runner_prefix`, e.g. `timeout 100000`) that forks
//! the runner: the wrapper gets SIGKILL when the thread that started it
//! ends (the server killed, or the model's worker gone), and the runner,
//! which asks for the same on its own parent, follows it.
//!
//! The one place of this module tree with `unsafe`: a hook that runs in
//! the child between fork and exec.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `command`'s process receive SIGKILL when the calling thread
/// ends; the spawn fails if the server is already gone by then.
pub fn die_with_this_thread(command: &mut Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe work is allowed: two raw system calls (prctl and
    // getppid), no allocation, no lock.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died before the signal was asked for.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("the server is gone"));
            }
            Ok(())
        });
    }
}
