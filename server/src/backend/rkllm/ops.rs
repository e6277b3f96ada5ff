//! What the runner asks of one runtime handle, each a single C call (or a
//! run: install the callback's state, `rkllm_run`, take it back). With the
//! ABI bindings (`abi`), the handle's owner and its callback (`handle`), the
//! library (`runtime`) and the vision encoder (`encoder`), this is where the
//! runner touches the runtime; the rest of the runner carries out what the
//! plan (`crate::plan`) decided and holds no `unsafe`.

use std::ffi::CStr;
use std::sync::Arc;

use super::abi::{self, RunSettings};
use super::handle::{ActiveRun, CallbackMode, ModelHandle};
use super::runtime::{Api, shared_call};
use super::runtime_error;
use crate::backend::{BackendError, TokenSink};

/// A run as the callback sees it: what it does with each callback.
pub(super) struct Watch<'m> {
    /// The run's id: an abort names it.
    pub run_id: u64,
    /// Token cap enforced with `rkllm_abort` (runtimes without a per-run cap).
    pub cap: Option<u32>,
    /// What each callback does.
    pub mode: CallbackMode<'m>,
}

impl ModelHandle {
    /// Runs `settings` once, its tokens going to `sink` and each callback
    /// handled as `watch` says: `rkllm_run`'s code and what the callbacks
    /// saw. The abort handle is told the run is over before this returns.
    ///
    /// # Errors
    /// The run's state lost, or a callback that panicked (the panic was
    /// caught at the C boundary): checked here once for every run.
    pub(super) fn run(
        &self,
        settings: &RunSettings<'_>,
        sink: &mut TokenSink<'_>,
        watch: Watch<'_>,
    ) -> Result<(i32, ActiveRun), BackendError> {
        let Watch { run_id, cap, mode } = watch;
        self.slot
            .install(sink, run_id, Arc::clone(&self.abort), cap, mode);
        let userdata = self.userdata();
        let rc = match &self.runtime.api {
            Api::V1_3(api) => abi::run_v1_3(api, self.handle, settings, userdata),
            Api::V1_2(api) => abi::run_v1_2(api, self.handle, settings, userdata),
        };
        self.abort.set_running(0);
        let Some(run) = self.slot.remove() else {
            return Err(runtime_error(Some(rc), "the run's state was lost"));
        };
        if run.panicked {
            return Err(runtime_error(
                None,
                "internal error while reading the runtime's output",
            ));
        }
        Ok((rc, run))
    }

    /// `rkllm_clear_kv_cache` of everything: what the runtime holds of a
    /// conversation, a paused generation included.
    pub(super) fn clear_kv(&self) -> i32 {
        let handle = self.handle.0.as_ptr();
        // SAFETY: the handle is live and owned by this thread; no run is in
        // progress; NULL ranges ask to clear everything.
        unsafe {
            shared_call!(
                self.runtime.api,
                rkllm_clear_kv_cache(handle, 0, std::ptr::null_mut(), std::ptr::null_mut())
            )
        }
    }

    /// The runtime's KV cache length (`rkllm_get_kv_cache_size`, one
    /// sequence); `None` when it does not say.
    pub(super) fn kv_size(&self) -> Option<u32> {
        let mut sizes = [0i32; 1];
        let handle = self.handle.0.as_ptr();
        // SAFETY: the handle is live and owned by this thread, no run is in
        // progress, and `sizes` has room for `n_batch` (1) entries.
        let rc = unsafe {
            shared_call!(
                self.runtime.api,
                rkllm_get_kv_cache_size(handle, sizes.as_mut_ptr())
            )
        };
        (rc == 0).then(|| u32::try_from(sizes[0]).unwrap_or(0))
    }

    /// `rkllm_set_chat_template` with three empty strings: the runtime
    /// takes the prompt as it is (the server renders the template).
    pub(super) fn template_off(&self) -> i32 {
        let handle = self.handle.0.as_ptr();
        let empty = c"".as_ptr();
        // SAFETY: the handle is live and owned by this thread; the strings
        // are static.
        unsafe {
            shared_call!(
                self.runtime.api,
                rkllm_set_chat_template(handle, empty, empty, empty)
            )
        }
    }

    /// `rkllm_set_function_tools`.
    pub(super) fn set_tools(&self, system: &CStr, tools: &CStr, tag: &CStr) -> i32 {
        let handle = self.handle.0.as_ptr();
        // SAFETY: the handle is live and owned by this thread; the strings
        // outlive the call.
        unsafe {
            shared_call!(
                self.runtime.api,
                rkllm_set_function_tools(handle, system.as_ptr(), tools.as_ptr(), tag.as_ptr())
            )
        }
    }

    /// `rkllm_load_prompt_cache`; the runtime's code when it refuses.
    pub(super) fn load_cache(&self, path: &CStr) -> Result<(), i32> {
        let handle = self.handle.0.as_ptr();
        // SAFETY: the handle is live and owned by this thread, no run is in
        // progress; the path is a NUL-terminated string.
        let rc = unsafe {
            shared_call!(
                self.runtime.api,
                rkllm_load_prompt_cache(handle, path.as_ptr())
            )
        };
        if rc == 0 { Ok(()) } else { Err(rc) }
    }

    /// `rkllm_release_prompt_cache`: prompts prefill from their start.
    pub(super) fn release_cache(&self) -> i32 {
        let handle = self.handle.0.as_ptr();
        // SAFETY: the handle is live and owned by this thread, no run is in
        // progress.
        unsafe { shared_call!(self.runtime.api, rkllm_release_prompt_cache(handle)) }
    }
}
