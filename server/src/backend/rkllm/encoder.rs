//! The vision encoder of a vision-language model: Rockchip's RKNN runtime
//! (`librknnrt.so`, through `rknn-sys`) running the model's `.rknn` file.
//!
//! An [`Encoder`] is opened with its model, on the model's worker thread,
//! and used and destroyed there. It reads the input tensor's size and
//! layout and the output tensors' shape from the runtime, hands it each
//! picture as RGB bytes (NHWC, the layout the runtime converts from), and
//! returns the image's embeddings as `f32`: `tokens × dim` per output,
//! interleaved token by token when the encoder has several outputs (as
//! Rockchip's demo concatenates them).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rknn_sys::api::{self as rknn, RknnApi};
use rknn_sys::libloading;

use crate::model::VisionSpec;

/// A loaded `librknnrt.so`.
pub struct RknnRuntime {
    api: RknnApi,
    path: PathBuf,
}

impl std::fmt::Debug for RknnRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RknnRuntime")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RknnRuntime {
    /// Opens the library at `path` (a bare name is found by the dynamic
    /// loader) and binds every function the encoder uses.
    ///
    /// # Errors
    /// A message naming the path: missing file, unloadable library or a
    /// missing function.
    pub fn load(path: &Path) -> Result<Self, String> {
        let bare_name = !path.to_string_lossy().contains('/');
        if !bare_name && !path.exists() {
            return Err(format!(
                "the RKNN runtime {} does not exist; a model with a vision_encoder needs \
                 librknnrt.so: install it or pass --rknn-runtime PATH",
                path.display()
            ));
        }
        // SAFETY: loading runs the library's initialisers; librknnrt.so (or
        // the test double) is a plain C library.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| {
            format!(
                "cannot load the RKNN runtime {}: {e}; a model with a vision_encoder needs \
                 librknnrt.so: install it or pass --rknn-runtime PATH",
                path.display()
            )
        })?;
        // SAFETY: the declarations are the runtime's documented ABI for
        // 64-bit targets (rknn-sys checks the layouts).
        let api = unsafe { RknnApi::from_library(library) }.map_err(|e| {
            format!(
                "the RKNN runtime {} lacks a function the vision encoder needs: {e}",
                path.display()
            )
        })?;
        tracing::info!(rknn_runtime = %path.display(), "RKNN runtime loaded");
        Ok(Self {
            api,
            path: path.to_owned(),
        })
    }
}

/// One opened vision encoder.
pub(super) struct Encoder {
    runtime: Arc<RknnRuntime>,
    context: rknn::rknn_context,
    /// Input width and height the encoder takes.
    pub width: u32,
    pub height: u32,
    /// Embedding tokens per image.
    pub tokens: usize,
    /// Floats per token and output.
    dim: usize,
    outputs: u32,
}

fn code(rc: i32) -> String {
    let name = match rc {
        rknn::RKNN_ERR_FAIL => "failed",
        rknn::RKNN_ERR_TIMEOUT => "timeout",
        rknn::RKNN_ERR_DEVICE_UNAVAILABLE => "device unavailable",
        rknn::RKNN_ERR_MALLOC_FAIL => "out of memory",
        rknn::RKNN_ERR_PARAM_INVALID => "invalid parameter",
        rknn::RKNN_ERR_MODEL_INVALID => "invalid model",
        rknn::RKNN_ERR_CTX_INVALID => "invalid context",
        rknn::RKNN_ERR_INPUT_INVALID => "invalid input",
        rknn::RKNN_ERR_OUTPUT_INVALID => "invalid output",
        rknn::RKNN_ERR_DEVICE_UNMATCH => "device mismatch",
        rknn::RKNN_ERR_TARGET_PLATFORM_UNMATCH => "model built for another platform",
        _ => "error",
    };
    format!("code {rc}, {name}")
}

impl Encoder {
    /// Opens the encoder `spec` names and reads its tensors' attributes.
    ///
    /// # Errors
    /// A message for the operator: the file, the runtime's code, or a
    /// tensor shape this server cannot feed.
    pub fn open(runtime: Arc<RknnRuntime>, spec: &VisionSpec) -> Result<Self, String> {
        let path = &spec.encoder;
        if !path.is_file() {
            return Err(format!("vision encoder {} does not exist", path.display()));
        }
        let c_path = CString::new(path.to_string_lossy().into_owned())
            .map_err(|_| format!("vision encoder path {} contains a NUL", path.display()))?;
        let api = &runtime.api;
        let mut context: rknn::rknn_context = 0;
        // SAFETY: with size 0 the runtime reads `model` as a NUL-terminated
        // path, valid for the call; `context` is written on success.
        let rc = unsafe {
            api.rknn_init(
                &raw mut context,
                c_path.as_ptr().cast_mut().cast(),
                0,
                0,
                std::ptr::null_mut(),
            )
        };
        if rc != rknn::RKNN_SUCC as i32 {
            return Err(format!(
                "rknn_init failed for vision encoder {} ({})",
                path.display(),
                code(rc)
            ));
        }
        // From here the context is owned: Drop destroys it on any error.
        let mut encoder = Self {
            runtime: Arc::clone(&runtime),
            context,
            width: 0,
            height: 0,
            tokens: 0,
            dim: 0,
            outputs: 0,
        };
        if spec.core_mask != 0 {
            // SAFETY: the context is live and owned by this thread.
            let rc = unsafe { api.rknn_set_core_mask(context, spec.core_mask) };
            if rc != 0 {
                return Err(format!(
                    "rknn_set_core_mask({}) failed ({})",
                    spec.core_mask,
                    code(rc)
                ));
            }
        }
        let mut io = rknn::rknn_input_output_num {
            n_input: 0,
            n_output: 0,
        };
        encoder.query(rknn::RKNN_QUERY_IN_OUT_NUM, &mut io)?;
        if io.n_input != 1 || io.n_output == 0 {
            return Err(format!(
                "the vision encoder has {} inputs and {} outputs; one input and at least one output expected",
                io.n_input, io.n_output
            ));
        }
        let input = encoder.attr(rknn::RKNN_QUERY_INPUT_ATTR, 0)?;
        let d = input.dims;
        let (height, width, channels) = if input.fmt == rknn::RKNN_TENSOR_NCHW {
            (d[2], d[3], d[1])
        } else {
            (d[1], d[2], d[3])
        };
        if input.n_dims != 4 || channels != 3 || width == 0 || height == 0 {
            return Err(format!(
                "the vision encoder's input is {:?} (format {}); a 4-dimensional RGB picture expected",
                &d[..input.n_dims.min(16) as usize],
                input.fmt
            ));
        }
        let output = encoder.attr(rknn::RKNN_QUERY_OUTPUT_ATTR, 0)?;
        let dims = &output.dims[..output.n_dims.min(16) as usize];
        let first = dims.iter().position(|&n| n > 1);
        let (tokens, dim) = match first {
            Some(i) if i + 1 < dims.len() => (dims[i] as usize, dims[i + 1] as usize),
            _ => {
                return Err(format!(
                    "the vision encoder's output is {dims:?}; [1, tokens, width] expected"
                ));
            }
        };
        encoder.width = width;
        encoder.height = height;
        encoder.tokens = tokens;
        encoder.dim = dim;
        encoder.outputs = io.n_output;
        tracing::info!(
            encoder = %path.display(),
            width, height, tokens, dim, outputs = io.n_output,
            "vision encoder loaded"
        );
        Ok(encoder)
    }

    fn query<T>(&self, command: rknn::rknn_query_cmd, info: &mut T) -> Result<(), String> {
        let size = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
        // SAFETY: `info` is the struct `command` fills, of `size` bytes.
        let rc = unsafe {
            self.runtime.api.rknn_query(
                self.context,
                command,
                std::ptr::from_mut(info).cast(),
                size,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("rknn_query({command}) failed ({})", code(rc)))
        }
    }

    fn attr(
        &self,
        command: rknn::rknn_query_cmd,
        index: u32,
    ) -> Result<rknn::rknn_tensor_attr, String> {
        // SAFETY: the attribute struct is integers, floats and a char array:
        // all zeroes is a valid value.
        let mut attr: rknn::rknn_tensor_attr = unsafe { std::mem::zeroed() };
        attr.index = index;
        self.query(command, &mut attr)?;
        Ok(attr)
    }

    /// Floats one image's embeddings take.
    pub fn floats_per_image(&self) -> usize {
        self.tokens * self.dim * self.outputs as usize
    }

    /// Runs the encoder on `pixels` (`width × height` RGB, NHWC) and
    /// appends the embeddings to `out`.
    ///
    /// # Errors
    /// The runtime's failure, or outputs of another size than announced.
    pub fn encode(&mut self, pixels: &[u8], out: &mut Vec<f32>) -> Result<(), String> {
        let api = &self.runtime.api;
        let expected = self.width as usize * self.height as usize * 3;
        if pixels.len() != expected {
            return Err(format!(
                "the picture has {} bytes, the encoder takes {expected}",
                pixels.len()
            ));
        }
        let mut input = rknn::rknn_input {
            index: 0,
            buf: pixels.as_ptr().cast_mut().cast(),
            size: u32::try_from(pixels.len()).unwrap_or(u32::MAX),
            pass_through: 0,
            type_: rknn::RKNN_TENSOR_UINT8,
            fmt: rknn::RKNN_TENSOR_NHWC,
        };
        // SAFETY: the context is live and owned by this thread; the runtime
        // copies the input during the call (`pixels` outlives it and is
        // only read).
        let rc = unsafe { api.rknn_inputs_set(self.context, 1, &raw mut input) };
        if rc != 0 {
            return Err(format!("rknn_inputs_set failed ({})", code(rc)));
        }
        // SAFETY: as above; a null extend asks for a blocking run.
        let rc = unsafe { api.rknn_run(self.context, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(format!("rknn_run failed ({})", code(rc)));
        }
        let n = self.outputs as usize;
        let mut outputs: Vec<rknn::rknn_output> = (0..self.outputs)
            .map(|index| rknn::rknn_output {
                want_float: 1,
                is_prealloc: 0,
                index,
                buf: std::ptr::null_mut(),
                size: 0,
            })
            .collect();
        // SAFETY: `outputs` holds `n` entries; the runtime allocates their
        // buffers, which stay valid until `rknn_outputs_release`.
        let rc = unsafe {
            api.rknn_outputs_get(
                self.context,
                self.outputs,
                outputs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(format!("rknn_outputs_get failed ({})", code(rc)));
        }
        let per_output = self.tokens * self.dim;
        let result = if outputs
            .iter()
            .all(|o| !o.buf.is_null() && o.size as usize == per_output * 4)
        {
            let slices: Vec<&[f32]> = outputs
                .iter()
                .map(|o| {
                    // SAFETY: the runtime gave a buffer of `size` bytes of
                    // floats (want_float), allocated with float alignment,
                    // valid until released below.
                    unsafe { std::slice::from_raw_parts(o.buf.cast::<f32>(), per_output) }
                })
                .collect();
            out.reserve(per_output * n);
            for token in 0..self.tokens {
                for slice in &slices {
                    out.extend_from_slice(&slice[token * self.dim..(token + 1) * self.dim]);
                }
            }
            Ok(())
        } else {
            Err(format!(
                "the vision encoder returned outputs of {:?} bytes, {} expected",
                outputs.iter().map(|o| o.size).collect::<Vec<_>>(),
                per_output * 4
            ))
        };
        // SAFETY: releases the buffers `rknn_outputs_get` allocated, once.
        unsafe { api.rknn_outputs_release(self.context, self.outputs, outputs.as_mut_ptr()) };
        result
    }
}

impl Drop for Encoder {
    fn drop(&mut self) {
        // SAFETY: the context came from a successful `rknn_init` and is
        // used by no one else.
        let rc = unsafe { self.runtime.api.rknn_destroy(self.context) };
        tracing::debug!(rc, "vision encoder destroyed");
    }
}
