//! End-to-end tests: each starts the real `rkllm-server` binary on
//! 127.0.0.1:0 and talks to it with real HTTP and WebSocket clients.

mod harness;

mod accounting;
mod board;
mod browser_guard;
mod cli_store;
mod cluster;
mod connections;
mod domains;
mod embeddings;
mod errors;
mod fim;
mod first_hour;
mod first_pull;
mod history;
mod lanes;
mod lifecycle;
mod logprobs;
mod lora;
mod mcp;
mod mcp_stateless;
mod production;
mod prompt_cache;
mod pulled_templates;
mod queueing;
mod reasoning;
mod remote_images;
mod rerank;
mod responses_hostile;
mod rkllm;
mod runners;
mod snapshots;
mod soak;
mod stdio;
mod store;
mod store_hostile;
mod streaming;
mod structured_npu;
mod systemd;
mod thinking_budget;
mod tokenizers;
mod ui;
mod untrusted_input;
mod vision;
mod vision_bombs;
