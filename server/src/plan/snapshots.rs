//! Which conversation snapshot a prompt starts from, and which are made.
//!
//! A snapshot is the runtime's prefill of a prompt, kept (by the NPU
//! runner in prompt-cache files, by the mock in memory) so that a
//! conversation that comes back after another one ran is not prefilled
//! again from its start. Before a conversation is sent whole, the snapshot
//! sharing the longest prefix with its prompt is loaded: the runtime
//! matches a loaded cache by longest common prefix (`RKLLM_ABI.md` §3.5)
//! and prefills only the rest. A conversation that opens with a long
//! system prompt (an agent's) has that prompt saved first, on its own, so
//! that every conversation that starts with it reuses it.
//!
//! This module decides; whoever keeps the snapshots carries it out and
//! says whether the disk has room.

pub use crate::model::Keeping;

/// A loaded snapshot is worth its file only when it covers this much.
pub const MIN_REUSE_BYTES: usize = 64;

/// A system prompt at least this long (about 500 tokens) is saved on its
/// own before the first conversation that starts with it.
pub const SYSTEM_PREFIX_MIN_BYTES: usize = 2048;

/// Bytes two texts share from their start, cut back to a character
/// boundary of `a`.
pub fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|&i| a.is_char_boundary(i)).unwrap_or(0)
}

/// Where the chat's system prompt (`system`, its text) ends in `prompt`.
pub fn system_prefix_end(system: &str, prompt: &str) -> Option<usize> {
    if system.is_empty() {
        return None;
    }
    prompt.find(system).map(|at| at + system.len())
}

/// One kept snapshot, as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept<'a> {
    /// The prompt whose prefill it holds.
    pub prompt: &'a str,
    /// When it was last used or saved (a counter: the larger, the later).
    pub used: u64,
    /// A system prompt saved on its own.
    pub system_prefix: bool,
}

/// The snapshot (its index in `kept`) sharing the longest prefix with
/// `prompt`, at least [`MIN_REUSE_BYTES`], and that length; of two that
/// share as much, the one used last.
pub fn best(kept: &[Kept<'_>], prompt: &str) -> Option<(usize, usize)> {
    kept.iter()
        .enumerate()
        .map(|(i, k)| (i, common_prefix(k.prompt, prompt)))
        .filter(|&(_, shared)| shared >= MIN_REUSE_BYTES)
        .max_by_key(|&(i, shared)| (shared, kept[i].used))
}

/// The snapshots a new one of `prompt`, kept as `keeping` says, makes
/// useless: those [`superseded`] says, and for [`Keeping::Replacing`] the
/// others of the same source (they begin with the prompt's `head` and share
/// at least [`MIN_REUSE_BYTES`] past it with it). Indices in `kept`,
/// ascending.
pub fn replaced(kept: &[Kept<'_>], prompt: &str, keeping: Keeping) -> Vec<usize> {
    let Keeping::Replacing { head } = keeping else {
        return superseded(kept, prompt);
    };
    let Some(opening) = prompt.get(..head) else {
        return superseded(kept, prompt);
    };
    let earlier = superseded(kept, prompt);
    (0..kept.len())
        .filter(|&i| {
            let k = &kept[i];
            earlier.contains(&i)
                || (!k.system_prefix
                    && k.prompt != prompt
                    && k.prompt.starts_with(opening)
                    && common_prefix(k.prompt, prompt) >= head + MIN_REUSE_BYTES)
        })
        .collect()
}

/// The snapshots a new one of `prompt` makes useless: earlier turns of the
/// same conversation (prompts it starts with), but not a system prompt
/// saved on its own. Indices in `kept`, ascending.
pub fn superseded(kept: &[Kept<'_>], prompt: &str) -> Vec<usize> {
    (0..kept.len())
        .filter(|&i| {
            let k = &kept[i];
            !k.system_prefix && k.prompt.len() < prompt.len() && prompt.starts_with(k.prompt)
        })
        .collect()
}

/// The snapshots to remove, least recently used first, until what is left
/// fits `max_files` and its sizes (`disk`, per snapshot) `max_bytes` on top
/// of `base` (the folder's own). Indices in `kept`.
pub fn evicted(
    kept: &[Kept<'_>],
    disk: &[u64],
    base: u64,
    max_bytes: u64,
    max_files: usize,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| kept[i].used);
    let mut total = base + disk.iter().sum::<u64>();
    let mut left = kept.len();
    let mut out = Vec::new();
    for i in order {
        if total <= max_bytes && left <= max_files {
            break;
        }
        total -= disk.get(i).copied().unwrap_or(0);
        left -= 1;
        out.push(i);
    }
    out
}

/// Before a prompt is sent whole: what to do with the snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    /// Save the prompt's first this many bytes (its long system prompt) on
    /// their own first, when the disk has room; the keeper then asks again
    /// (that one is then the best start).
    pub save_prefix: Option<usize>,
    /// Which snapshot the runtime is to hold for the run.
    pub load: Load,
    /// Whether a snapshot of the prompt itself is saved by its run (when
    /// the disk has room): none of exactly it is kept, and saves work.
    pub save: bool,
}

/// Which snapshot the runtime holds for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// The one at this index in `kept` (a hit; it may be held already).
    Snapshot(usize),
    /// What the runtime holds covers the prompt best already (the model's
    /// system-prompt cache, or nothing to reuse while a cache covers some).
    AsItIs,
    /// None: release whatever is held (a miss).
    Release,
}

/// What the snapshots' keeper tells the planner.
#[derive(Debug, Clone, Copy)]
pub struct Store<'a> {
    /// The snapshots kept.
    pub kept: &'a [Kept<'a>],
    /// Saves work (the runtime writes them).
    pub saves: bool,
}

/// [`restore`] for a prompt kept as `keeping` says: with
/// [`Keeping::Prefix`], the prefix is saved on its own first (when no kept
/// snapshot covers it yet, and it is worth a file) and the prompt itself
/// is not; otherwise as [`restore`].
pub fn restore_keeping(
    store: Store<'_>,
    system: &str,
    prompt: &str,
    covered: usize,
    keeping: Keeping,
) -> Restore {
    let mut plan = restore(store, system, prompt, covered);
    if let Keeping::Prefix(end) = keeping
        && end <= prompt.len()
        && prompt.is_char_boundary(end)
    {
        let best = best(store.kept, prompt);
        plan.save_prefix = (end >= MIN_REUSE_BYTES
            && covered < end
            && store.saves
            && best.is_none_or(|(_, shared)| shared < end))
        .then_some(end);
        plan.save = false;
    }
    plan
}

/// Before `prompt` (a chat sent whole whose system message's text is
/// `system`, empty without one) runs: which snapshot it starts from and
/// which are saved. `covered`: bytes of it the model's system-prompt cache,
/// loaded already, covers.
pub fn restore(store: Store<'_>, system: &str, prompt: &str, covered: usize) -> Restore {
    let best = best(store.kept, prompt);
    let save_prefix = system_prefix_end(system, prompt).filter(|&end| {
        end >= SYSTEM_PREFIX_MIN_BYTES
            && covered < end
            && store.saves
            && best.is_none_or(|(_, shared)| shared < end)
    });
    let load = match best {
        Some((index, shared)) if shared > covered => Load::Snapshot(index),
        _ if covered == 0 => Load::Release,
        _ => Load::AsItIs,
    };
    let save = store.saves && !store.kept.iter().any(|k| k.prompt == prompt);
    Restore {
        save_prefix,
        load,
        save,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_is_saved_on_its_own_and_the_prompt_is_not() {
        let shared = "judge: ".repeat(20);
        let first = format!("{shared}document one");
        let plan = restore_keeping(
            Store {
                kept: &[],
                saves: true,
            },
            "",
            &first,
            0,
            Keeping::Prefix(shared.len()),
        );
        assert_eq!(plan.save_prefix, Some(shared.len()));
        assert!(!plan.save);
        // Once it is kept, the next judgement starts from it, saving nothing.
        let k = [Kept {
            prompt: &shared,
            used: 1,
            system_prefix: true,
        }];
        let second = format!("{shared}document two");
        let plan = restore_keeping(
            Store {
                kept: &k,
                saves: true,
            },
            "",
            &second,
            0,
            Keeping::Prefix(shared.len()),
        );
        assert_eq!(
            (plan.save_prefix, plan.load, plan.save),
            (None, Load::Snapshot(0), false)
        );
    }

    #[test]
    fn a_completion_replaces_the_snapshots_of_its_file_and_no_others() {
        let file = format!("<pre>{}", "fn main() {\n".repeat(10));
        let earlier = format!("{file}let a<suf>}}<mid>");
        let other_file = format!("<pre>{}<suf><mid>", "struct S;\n".repeat(10));
        let chat = format!("system: {}", "x".repeat(100));
        let k = kept(&[
            Box::leak(earlier.into_boxed_str()),
            Box::leak(other_file.into_boxed_str()),
            Box::leak(chat.into_boxed_str()),
        ]);
        let now = format!("{file}let ab<suf>}}<mid>");
        assert_eq!(replaced(&k, &now, Keeping::Replacing { head: 5 }), vec![0]);
        assert!(replaced(&k, &now, Keeping::Whole).is_empty());
    }

    fn kept(prompts: &[&'static str]) -> Vec<Kept<'static>> {
        prompts
            .iter()
            .enumerate()
            .map(|(i, p)| Kept {
                prompt: p,
                used: i as u64,
                system_prefix: false,
            })
            .collect()
    }

    #[test]
    fn the_shared_prefix_stops_at_a_character_boundary() {
        assert_eq!(common_prefix("héllo", "hélp"), 4);
        assert_eq!(common_prefix("hé", "hè"), 1);
        assert_eq!(common_prefix("", "x"), 0);
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_a_short_one_is_none() {
        let long = "a".repeat(100);
        let longer = format!("{long}bbbb");
        let prompts: Vec<&'static str> = vec![
            Box::leak(long.clone().into_boxed_str()),
            Box::leak(longer.clone().into_boxed_str()),
        ];
        let k = kept(&prompts);
        assert_eq!(best(&k, &format!("{longer}c")), Some((1, 104)));
        // Two share as much: the one used last.
        assert_eq!(best(&k, &format!("{long}x")), Some((1, 100)));
        assert_eq!(best(&k, "short"), None);
    }

    #[test]
    fn a_later_turn_supersedes_the_earlier_ones_but_not_a_system_prompt() {
        let mut k = kept(&["S user: a", "S user: a assistant: b", "other"]);
        k.insert(
            0,
            Kept {
                prompt: "S",
                used: 9,
                system_prefix: true,
            },
        );
        assert_eq!(superseded(&k, "S user: a assistant: b user: c"), vec![1, 2]);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_until_it_fits() {
        let k = kept(&["a", "b", "c", "d"]);
        let disk = [10, 10, 10, 10];
        assert_eq!(evicted(&k, &disk, 4, 100, 10), Vec::<usize>::new());
        assert_eq!(evicted(&k, &disk, 4, 30, 10), vec![0, 1]);
        assert_eq!(evicted(&k, &disk, 0, 100, 3), vec![0]);
    }

    #[test]
    fn a_long_system_prompt_is_saved_first_when_nothing_covers_it() {
        let system = "s".repeat(SYSTEM_PREFIX_MIN_BYTES);
        let prompt = format!("<sys>{system}</sys> user: hi");
        let store = Store {
            kept: &[],
            saves: true,
        };
        let r = restore(store, &system, &prompt, 0);
        assert_eq!(r.save_prefix, Some(5 + system.len()));
        assert_eq!(r.load, Load::Release);
        assert!(r.save);
        // Saved: asked again, it is the start.
        let saved: Vec<Kept<'_>> = vec![Kept {
            prompt: &prompt[..5 + system.len()],
            used: 1,
            system_prefix: true,
        }];
        let r = restore(
            Store {
                kept: &saved,
                saves: true,
            },
            &system,
            &prompt,
            0,
        );
        assert_eq!((r.save_prefix, r.load), (None, Load::Snapshot(0)));
        // A cache covering it already, or saves that fail: not again.
        assert_eq!(
            restore(store, &system, &prompt, prompt.len() - 4).save_prefix,
            None
        );
        let failing = Store {
            kept: &[],
            saves: false,
        };
        let r = restore(failing, &system, &prompt, 0);
        assert_eq!((r.save_prefix, r.save), (None, false));
        // A short system prompt is not saved on its own.
        assert_eq!(
            restore(store, "short", "short user: hi", 0).save_prefix,
            None
        );
    }

    #[test]
    fn the_best_snapshot_is_loaded_and_none_is_a_miss() {
        let first = format!("{} user: a", "x".repeat(80));
        let prompts: Vec<&'static str> = vec![Box::leak(first.clone().into_boxed_str())];
        let k = kept(&prompts);
        let store = Store {
            kept: &k,
            saves: true,
        };
        let next = format!("{first} assistant: b user: c");
        let r = restore(store, "", &next, 0);
        assert_eq!(r.load, Load::Snapshot(0));
        assert!(r.save);
        // Exactly it kept: loaded, not saved again.
        let r = restore(store, "", &first, 0);
        assert_eq!((r.load, r.save), (Load::Snapshot(0), false));
        // Nothing shared: release what is held, a miss.
        assert_eq!(restore(store, "", "y user: z", 0).load, Load::Release);
        // The system-prompt cache covers more than any snapshot: as it is.
        assert_eq!(restore(store, "", &next, 90).load, Load::AsItIs);
    }
}
