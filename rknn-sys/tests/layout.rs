//! Sizes and offsets of the structs the server uses, checked against the
//! runtime's layout on 64-bit targets (LP64: aarch64 boards, x86-64).

use std::mem::{offset_of, size_of};

use rknn_sys::api::*;

#[test]
fn tensor_attr_layout() {
    assert_eq!(size_of::<rknn_tensor_attr>(), 376);
    assert_eq!(offset_of!(rknn_tensor_attr, index), 0);
    assert_eq!(offset_of!(rknn_tensor_attr, n_dims), 4);
    assert_eq!(offset_of!(rknn_tensor_attr, dims), 8);
    assert_eq!(offset_of!(rknn_tensor_attr, name), 72);
    assert_eq!(offset_of!(rknn_tensor_attr, n_elems), 328);
    assert_eq!(offset_of!(rknn_tensor_attr, size), 332);
    assert_eq!(offset_of!(rknn_tensor_attr, fmt), 336);
    assert_eq!(offset_of!(rknn_tensor_attr, type_), 340);
    assert_eq!(offset_of!(rknn_tensor_attr, qnt_type), 344);
    assert_eq!(offset_of!(rknn_tensor_attr, fl), 348);
    assert_eq!(offset_of!(rknn_tensor_attr, zp), 352);
    assert_eq!(offset_of!(rknn_tensor_attr, scale), 356);
    assert_eq!(offset_of!(rknn_tensor_attr, w_stride), 360);
    assert_eq!(offset_of!(rknn_tensor_attr, size_with_stride), 364);
    assert_eq!(offset_of!(rknn_tensor_attr, pass_through), 368);
    assert_eq!(offset_of!(rknn_tensor_attr, h_stride), 372);
}

#[test]
fn input_and_output_layout() {
    assert_eq!(size_of::<rknn_input>(), 32);
    assert_eq!(offset_of!(rknn_input, index), 0);
    assert_eq!(offset_of!(rknn_input, buf), 8);
    assert_eq!(offset_of!(rknn_input, size), 16);
    assert_eq!(offset_of!(rknn_input, pass_through), 20);
    assert_eq!(offset_of!(rknn_input, type_), 24);
    assert_eq!(offset_of!(rknn_input, fmt), 28);

    assert_eq!(size_of::<rknn_output>(), 24);
    assert_eq!(offset_of!(rknn_output, want_float), 0);
    assert_eq!(offset_of!(rknn_output, is_prealloc), 1);
    assert_eq!(offset_of!(rknn_output, index), 4);
    assert_eq!(offset_of!(rknn_output, buf), 8);
    assert_eq!(offset_of!(rknn_output, size), 16);
}

#[test]
fn small_structs_layout() {
    assert_eq!(size_of::<rknn_context>(), 8);
    assert_eq!(size_of::<rknn_input_output_num>(), 8);
    assert_eq!(offset_of!(rknn_input_output_num, n_output), 4);
    assert_eq!(size_of::<rknn_sdk_version>(), 512);
    assert_eq!(offset_of!(rknn_sdk_version, drv_version), 256);
    assert_eq!(size_of::<rknn_init_extend>(), 136);
    assert_eq!(offset_of!(rknn_init_extend, reserved), 24);
    assert_eq!(size_of::<rknn_run_extend>(), 24);
    assert_eq!(offset_of!(rknn_run_extend, non_block), 8);
    assert_eq!(offset_of!(rknn_run_extend, fence_fd), 16);
    assert_eq!(size_of::<rknn_output_extend>(), 8);
}

#[test]
fn enum_values() {
    assert_eq!(RKNN_TENSOR_UINT8, 3);
    assert_eq!(RKNN_TENSOR_FLOAT32, 0);
    assert_eq!(RKNN_TENSOR_NCHW, 0);
    assert_eq!(RKNN_TENSOR_NHWC, 1);
    assert_eq!(RKNN_QUERY_IN_OUT_NUM, 0);
    assert_eq!(RKNN_QUERY_INPUT_ATTR, 1);
    assert_eq!(RKNN_QUERY_OUTPUT_ATTR, 2);
    assert_eq!(RKNN_NPU_CORE_0_1_2, 7);
    assert_eq!(RKNN_NPU_CORE_ALL, 0xffff);
}
