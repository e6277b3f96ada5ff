//! NPU memory domains. The NPU addresses memory in 32-bit domains of
//! 4 GiB; models loaded at once fit when each starts in its own
//! (RKLLM_ABI.md: `base_domain_id`; two instances in one domain can
//! exhaust it, and runtime 1.3.0 then segfaults in `rkllm_init`). A vision
//! model's RKNN encoder takes domain 0, so its language model starts above
//! it. The engine gives each model it loads the lowest domains no other
//! loaded model holds, unless the model names its own (`base_domain_id`
//! in its `[[models]]` entry), and takes them back when it unloads.

use parking_lot::Mutex;

use crate::model::ModelSpec;

/// The bytes one domain addresses.
pub const DOMAIN_BYTES: u64 = 1 << 32;

/// The domains the loaded models hold.
#[derive(Debug)]
pub(super) struct Domains {
    /// The lowest domain given (`rkllm.base_domain_id`).
    first: i32,
    held: Mutex<Vec<(String, Vec<i32>)>>,
}

impl Domains {
    pub fn new(first: i32) -> Self {
        Self {
            first,
            held: Mutex::new(Vec::new()),
        }
    }

    /// Domains a model's weights span: one per 4 GiB of its file, at
    /// least one.
    fn span(spec: &ModelSpec) -> i32 {
        let bytes = spec
            .path
            .as_deref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len());
        i32::try_from(bytes.div_ceil(DOMAIN_BYTES).max(1)).unwrap_or(i32::MAX)
    }

    /// `spec` with the domain it starts in, which it holds until
    /// [`Self::give_back`]: its own setting, or the lowest run of free
    /// domains it spans (above domain 0 for a vision model, whose encoder
    /// is there).
    pub fn assign(&self, spec: &ModelSpec) -> ModelSpec {
        let mut held = self.held.lock();
        held.retain(|(model, _)| *model != spec.name);
        let span = Self::span(spec);
        let start = spec.settings.base_domain_id.unwrap_or_else(|| {
            let used: Vec<i32> = held.iter().flat_map(|(_, d)| d.iter().copied()).collect();
            let lowest = if spec.vision.is_some() {
                self.first.max(1)
            } else {
                self.first
            };
            (lowest..i32::MAX)
                .find(|&s| (s..s.saturating_add(span)).all(|d| !used.contains(&d)))
                .unwrap_or(lowest)
        });
        let mut domains: Vec<i32> = (start..start.saturating_add(span)).collect();
        if spec.vision.is_some() && !domains.contains(&0) {
            domains.push(0);
        }
        held.push((spec.name.clone(), domains));
        let mut assigned = spec.clone();
        assigned.settings.base_domain_id = Some(start);
        assigned
    }

    /// The domains `model` held are free again.
    pub fn give_back(&self, model: &str) {
        self.held.lock().retain(|(held, _)| held != model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ModelSpec {
        ModelSpec::named(name)
    }

    #[test]
    fn loaded_models_get_distinct_domains_and_give_them_back() {
        let domains = Domains::new(0);
        let domain = |s: &ModelSpec| domains.assign(s).settings.base_domain_id;
        assert_eq!(domain(&spec("a")), Some(0));
        assert_eq!(domain(&spec("b")), Some(1));
        // Loaded again (another lane, a reload): the same domain.
        assert_eq!(domain(&spec("a")), Some(0));
        domains.give_back("a");
        assert_eq!(domain(&spec("c")), Some(0));
        // Its own setting wins.
        let mut pinned = spec("d");
        pinned.settings.base_domain_id = Some(5);
        assert_eq!(domain(&pinned), Some(5));
        // The lowest free one after the others, from `first`.
        assert_eq!(domain(&spec("e")), Some(2));
        let from_two = Domains::new(2);
        assert_eq!(from_two.assign(&spec("a")).settings.base_domain_id, Some(2));
    }

    #[test]
    fn a_vision_models_language_model_starts_above_its_encoders_domain() {
        let domains = Domains::new(0);
        let mut vision = spec("vl");
        vision.vision = Some(
            crate::model::VisionSpec::defaults("vl", std::path::Path::new("vl.rknn"), None)
                .unwrap(),
        );
        assert_eq!(domains.assign(&vision).settings.base_domain_id, Some(1));
        // Domain 0 is its encoder's: the next model goes above both.
        assert_eq!(
            domains.assign(&spec("text")).settings.base_domain_id,
            Some(2)
        );
    }

    #[test]
    fn a_large_file_spans_several_domains() {
        let dir = std::env::temp_dir().join(format!("rkllm-domains-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.rkllm");
        // Sparse: over 8 GiB of size, no blocks.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(2 * DOMAIN_BYTES + 1)
            .unwrap();
        let domains = Domains::new(0);
        let mut large = spec("large");
        large.path = Some(big);
        assert_eq!(domains.assign(&large).settings.base_domain_id, Some(0));
        assert_eq!(
            domains.assign(&spec("next")).settings.base_domain_id,
            Some(3)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
