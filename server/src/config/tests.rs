use super::*;

fn key_of(err: ConfigError) -> &'static str {
    match err {
        ConfigError::Invalid { key, .. } => key,
        other => panic!("expected an invalid value, got {other}"),
    }
}

#[test]
fn the_defaults_are_valid_and_serve_the_mock_on_loopback() {
    let config = Config::default();
    config.validate().unwrap();
    assert_eq!(config.listen_addr().unwrap().to_string(), "127.0.0.1:8080");
    assert_eq!(config.backend, BackendKind::Mock);
    assert_eq!(config.model_specs()[0].name, "mock");
}

#[test]
fn flags_override_the_file() {
    let dir = std::env::temp_dir().join(format!("rkllm-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:9000\"\n[mock]\ntokens_per_second = 5.0\n[engine]\nqueue_len = 3\n",
    )
    .unwrap();
    let cli = Cli {
        config: Some(file),
        listen: Some("127.0.0.1:9001".into()),
        ..Cli::default()
    };
    let config = Config::load(cli).unwrap();
    assert_eq!(config.listen, "127.0.0.1:9001");
    assert_eq!(config.mock.tokens_per_second, 5.0);
    assert_eq!(config.engine.queue_len, 3);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn invalid_values_name_their_key() {
    let cases: Vec<(Config, &str)> = vec![
        (
            Config {
                listen: "nope".into(),
                ..Config::default()
            },
            "listen",
        ),
        (
            Config {
                node_id: Some("board 1".into()),
                ..Config::default()
            },
            "node_id",
        ),
        (
            Config {
                agent_listen: Some("nowhere".into()),
                ..Config::default()
            },
            "agent_listen",
        ),
        (
            Config {
                mock: MockSection {
                    tokens_per_second: -1.0,
                    ..MockSection::default()
                },
                ..Config::default()
            },
            "mock.tokens_per_second",
        ),
        (
            Config {
                mock: MockSection {
                    lanes: 0,
                    ..MockSection::default()
                },
                ..Config::default()
            },
            "mock.lanes",
        ),
        (
            Config {
                engine: EngineSection {
                    queue_len: 0,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.queue_len",
        ),
        (
            Config {
                engine: EngineSection {
                    background_max_wait_secs: 0,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.background_max_wait_secs",
        ),
        (
            Config {
                engine: EngineSection {
                    background_max_overtaken: 0,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.background_max_overtaken",
        ),
        (
            Config {
                engine: EngineSection {
                    max_loaded_models: 0,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.max_loaded_models",
        ),
        (
            Config {
                engine: EngineSection {
                    keep_alive_secs: -2,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.keep_alive_secs",
        ),
        (
            Config {
                engine: EngineSection {
                    preload: vec!["a".into(), "b".into()],
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.preload",
        ),
        (
            Config {
                engine: EngineSection {
                    stall_timeout_secs: 0,
                    ..EngineSection::default()
                },
                ..Config::default()
            },
            "engine.stall_timeout_secs",
        ),
        (
            Config {
                backend: BackendKind::Rkllm,
                rkllm: RkllmSection {
                    snapshot_min_free_mb: -1.0,
                    ..RkllmSection::default()
                },
                ..Config::default()
            },
            "rkllm.snapshot_min_free_mb",
        ),
        (
            Config {
                streams: StreamsSection {
                    idle_timeout_secs: 0,
                    ..StreamsSection::default()
                },
                ..Config::default()
            },
            "streams.idle_timeout_secs",
        ),
        (
            Config {
                streams: StreamsSection {
                    max_total_bytes: 10,
                    ..StreamsSection::default()
                },
                ..Config::default()
            },
            "streams.max_total_bytes",
        ),
        (
            Config {
                limits: LimitsSection {
                    default_max_tokens: Some(0),
                    ..LimitsSection::default()
                },
                ..Config::default()
            },
            "limits.default_max_tokens",
        ),
        (
            Config {
                log_level: "[[[".into(),
                ..Config::default()
            },
            "log_level",
        ),
        (
            Config {
                models: vec![
                    ModelEntry {
                        name: "a".into(),
                        path: None,
                        chat_template: None,
                        default: false,
                        vision_encoder: None,
                        vision: None,
                        embedding: false,
                        reranker: false,
                        pooling: None,
                        normalize: None,
                        lora: Vec::new(),
                        system_prompt_cache: None,
                        reasoning: None,
                        tokenizer: None,
                        settings: crate::model::ModelSettings::default(),
                    },
                    ModelEntry {
                        name: "a".into(),
                        path: None,
                        chat_template: None,
                        default: false,
                        vision_encoder: None,
                        vision: None,
                        embedding: false,
                        reranker: false,
                        pooling: None,
                        normalize: None,
                        lora: Vec::new(),
                        system_prompt_cache: None,
                        reasoning: None,
                        tokenizer: None,
                        settings: crate::model::ModelSettings::default(),
                    },
                ],
                ..Config::default()
            },
            "models.name",
        ),
    ];
    let store = |store: StoreSection| Config {
        store,
        ..Config::default()
    };
    let cases = cases.into_iter().chain([
        (
            store(StoreSection {
                max_file_bytes: 0,
                ..StoreSection::default()
            }),
            "store.max_file_bytes",
        ),
        (
            store(StoreSection {
                rate_window_secs: 0,
                ..StoreSection::default()
            }),
            "store.rate_window_secs",
        ),
        (
            store(StoreSection {
                pull_timeout_secs: 0,
                ..StoreSection::default()
            }),
            "store.pull_timeout_secs",
        ),
    ]);
    for (config, key) in cases {
        let err = config.validate().unwrap_err();
        let message = err.to_string();
        assert!(message.contains(key), "{message}");
        assert_eq!(key_of(err), key);
    }
}

#[test]
fn remote_image_allow_takes_addresses_and_blocks_and_names_a_bad_entry() {
    let config: Config =
        toml::from_str("[limits]\nremote_image_allow = [\"192.168.1.10\", \"10.0.0.0/8\"]\n")
            .unwrap();
    config.validate().unwrap();
    let filter = config.transport_settings().remote_images.filter;
    for (ip, permitted) in [
        ("192.168.1.10", true),
        ("10.1.2.3", true),
        ("192.168.1.11", false),
        ("127.0.0.1", false),
    ] {
        assert_eq!(filter.permits(ip.parse().unwrap()), permitted, "{ip}");
    }
    let bad: Config = toml::from_str("[limits]\nremote_image_allow = [\"lan-server\"]\n").unwrap();
    let err = bad.validate().unwrap_err();
    assert!(err.to_string().contains("`lan-server`"), "{err}");
    assert_eq!(key_of(err), "limits.remote_image_allow");
}

#[test]
fn unknown_keys_in_the_file_are_refused_by_name() {
    let err = toml::from_str::<Config>("[streams]\nidle_timeout = 5\n").unwrap_err();
    assert!(err.to_string().contains("idle_timeout"), "{err}");
}

#[test]
fn chat_templates_are_read_by_name_or_as_a_table_and_bad_ones_are_named() {
    let config: Config = toml::from_str(
        "chat_template = \"chatml\"\n[[models]]\nname = \"a\"\n[[models]]\nname = \"b\"\n\
         chat_template = { message = \"<{role}>{content}\", assistant = \"<assistant>\", stop = [\"<user>\"] }\n",
    )
    .unwrap();
    config.validate().unwrap();
    let specs = config.model_specs();
    assert_eq!(specs[0].template, crate::model::ChatTemplate::ChatMl);
    assert!(
        matches!(&specs[1].template, crate::model::ChatTemplate::Custom(t) if t.stop == ["<user>"])
    );
    let bad = Config {
        chat_template: TemplateSetting::Named("mistral".into()),
        ..Config::default()
    };
    assert_eq!(key_of(bad.validate().unwrap_err()), "chat_template");
}

#[test]
fn a_model_file_names_the_model() {
    let config = Config {
        model: Some("/models/qwen2.5-1.5b.rkllm".into()),
        ..Config::default()
    };
    assert_eq!(config.model_specs()[0].name, "qwen2.5-1.5b");
}

#[test]
fn the_documented_config_file_parses_and_shows_the_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/rkllm-server.toml");
    let config = Config::from_file(&path).unwrap();
    config.validate().unwrap();
    assert_eq!(
        config,
        Config::default(),
        "config/rkllm-server.toml must show every default"
    );
}

#[test]
fn models_carry_their_own_settings_and_the_default_goes_first() {
    let config: Config = toml::from_str(
        "[[models]]\nname = \"small\"\n\n[[models]]\nname = \"big\"\ndefault = true\nmax_context_len = 8192\ntemperature = 0.3\n",
    )
    .unwrap();
    config.validate().unwrap();
    let specs = config.model_specs();
    assert_eq!(specs[0].name, "big");
    assert_eq!(specs[0].settings.max_context_len, Some(8192));
    assert_eq!(specs[0].settings.temperature, Some(0.3));
    assert_eq!(specs[1].settings, crate::model::ModelSettings::default());
    let two: Config = toml::from_str(
        "[[models]]\nname = \"a\"\ndefault = true\n[[models]]\nname = \"b\"\ndefault = true\n",
    )
    .unwrap();
    assert_eq!(key_of(two.validate().unwrap_err()), "models.default");
    let hot: Config = toml::from_str("[[models]]\nname = \"a\"\ntemperature = 9.0\n").unwrap();
    assert_eq!(key_of(hot.validate().unwrap_err()), "models.temperature");
}

#[test]
fn the_node_is_named_by_node_id_else_by_the_host_name() {
    let named = Config {
        node_id: Some("board-1.lab_2".into()),
        ..Config::default()
    };
    assert!(named.validate().is_ok());
    assert_eq!(named.node_name(), "board-1.lab_2");
    let host = Config::default().node_name();
    assert!(super::valid_node_id(&host), "{host}");
    match std::fs::read_to_string("/proc/sys/kernel/hostname") {
        Ok(name) if super::valid_node_id(name.trim()) => assert_eq!(host, name.trim()),
        _ => assert_eq!(host, "rkllm-server"),
    }
    assert!(!super::valid_node_id(""));
    assert!(!super::valid_node_id(&"x".repeat(64)));
    assert!(!super::valid_node_id("a/b"));
}

#[test]
fn a_vision_models_decode_budget_is_read_and_checked() {
    let config = |budget: &str| -> Config {
        toml::from_str(&format!(
            "backend = \"rkllm\"\n[[models]]\nname = \"vl\"\npath = \"/m/vl.rkllm\"\n\
             vision_encoder = \"/m/vl.rknn\"\n[models.vision]\n{budget}\n"
        ))
        .unwrap()
    };
    let vision = |c: &Config| c.models[0].vision.clone().unwrap_or_default();
    let spec = |c: &Config| vision(c).resolve("vl", "/m/vl.rknn".as_ref()).unwrap();
    assert_eq!(
        spec(&config("")).limits.max_image_decode_bytes,
        crate::backend::image::DEFAULT_MAX_IMAGE_DECODE_BYTES
    );
    let raised = config("max_image_decode_bytes = 134217728");
    assert_eq!(spec(&raised).limits.max_image_decode_bytes, 134_217_728);
    let low = config("max_image_decode_bytes = 1000");
    let err = vision(&low)
        .resolve("vl", "/m/vl.rknn".as_ref())
        .unwrap_err();
    assert_eq!(
        err,
        "max_image_decode_bytes must be between 2097152 and 4294967296, got 1000"
    );
    assert_eq!(key_of(low.validate().unwrap_err()), "models.vision");
}

#[test]
fn connection_limits_name_their_key() {
    let ws = |max_connections, max_connections_per_ip| Config {
        websocket: WebSocketSection {
            max_connections,
            max_connections_per_ip,
            ..WebSocketSection::default()
        },
        ..Config::default()
    };
    let body = Config {
        http: HttpSection {
            body_read_timeout_secs: 0,
            ..HttpSection::default()
        },
        ..Config::default()
    };
    for (config, key) in [
        (ws(0, 0), "websocket.max_connections"),
        (ws(10, 11), "websocket.max_connections_per_ip"),
        (body, "http.body_read_timeout_secs"),
    ] {
        assert_eq!(key_of(config.validate().unwrap_err()), key);
    }
    ws(10, 0).validate().unwrap();
    ws(10, 10).validate().unwrap();
}

#[test]
fn a_tokenizer_is_a_file_or_a_repository_fetched_into_the_store() {
    let config: Config = toml::from_str(
        "[store]\nmodels_dir = \"/store\"\n\
         [[models]]\nname = \"local\"\ntokenizer = \"/opt/qwen/tokenizer.json\"\n\
         [[models]]\nname = \"hub\"\ntokenizer = \"Qwen/Qwen2.5-1.5B-Instruct\"\n\
         [[models]]\nname = \"none\"\n",
    )
    .unwrap();
    config.validate().unwrap();
    let source = |name: &str| {
        config
            .model_specs()
            .into_iter()
            .find(|m| m.name == name)
            .unwrap()
            .tokenizer
    };
    use crate::model::tokenizer::TokenizerSource::File;
    assert_eq!(
        source("local"),
        Some(File("/opt/qwen/tokenizer.json".into()))
    );
    assert_eq!(
        source("hub"),
        Some(File(
            "/store/.tokenizers/Qwen/Qwen2.5-1.5B-Instruct/tokenizer.json".into()
        ))
    );
    assert_eq!(source("none"), None);
    let fetched = config.hub_tokenizers();
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0].0, "hub");
    assert_eq!(fetched[0].1.label(), "Qwen/Qwen2.5-1.5B-Instruct");

    let bad: Config = toml::from_str("[[models]]\nname = \"a\"\ntokenizer = \"qwen\"\n").unwrap();
    let err = bad.validate().unwrap_err().to_string();
    assert!(
        err.contains("models.tokenizer") && err.contains("model `a`"),
        "{err}"
    );
    let flag = Config {
        model: Some("/models/qwen.rkllm".into()),
        tokenizer: Some("a/b/c".into()),
        ..Config::default()
    };
    assert_eq!(key_of(flag.validate().unwrap_err()), "tokenizer");
    // Without --model it would name no model's tokenizer: refused, not ignored.
    let alone = Config {
        tokenizer: Some("/opt/qwen/tokenizer.json".into()),
        ..Config::default()
    };
    let err = alone.validate().unwrap_err();
    assert!(err.to_string().contains("[[models]] entry"), "{err}");
    assert_eq!(key_of(err), "tokenizer");
    Config {
        model: Some("/models/qwen.rkllm".into()),
        tokenizer: Some("Qwen/Qwen2.5-1.5B-Instruct".into()),
        ..Config::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn a_jinja_chat_template_is_read_as_text_or_from_a_file_and_a_broken_one_is_named() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/chat-templates/qwen2.5.jinja"
    );
    let text = TemplateSetting::Named("{% for m in messages %}{{ m.content }}{% endfor %}".into());
    assert!(matches!(
        text.resolve().unwrap(),
        crate::model::ChatTemplate::Jinja(_)
    ));
    let file = TemplateSetting::Named(fixture.into()).resolve().unwrap();
    assert!(
        matches!(&file, crate::model::ChatTemplate::Jinja(t) if t.source.contains("<|im_start|>"))
    );
    let table: Config = toml::from_str(&format!(
        "[[models]]\nname = \"q\"\nchat_template = {{ jinja = {fixture:?}, eos_token = \"<|im_end|>\" }}\n"
    ))
    .unwrap();
    assert_eq!(
        table.model_specs()[0].template.stop_strings(),
        vec!["<|im_end|>".to_owned()]
    );
    let broken = Config {
        chat_template: TemplateSetting::Named("{% for m in messages %}".into()),
        ..Config::default()
    };
    assert_eq!(key_of(broken.validate().unwrap_err()), "chat_template");
    let missing = Config {
        chat_template: TemplateSetting::Named("/nonexistent/template.jinja".into()),
        ..Config::default()
    };
    assert_eq!(key_of(missing.validate().unwrap_err()), "chat_template");
}

#[test]
fn a_reranker_is_not_an_embedding_model_and_needs_its_tokenizer_on_the_npu() {
    let field = |text: &str| {
        let config: Config = toml::from_str(text).unwrap();
        config.validate().err().map(|e| e.to_string())
    };
    let both = field("[[models]]\nname = \"r\"\nreranker = true\nembedding = true\n").unwrap();
    assert!(
        both.contains("models.reranker") && both.contains("embedding"),
        "{both}"
    );
    let npu = field(
        "backend = \"rkllm\"\n[[models]]\nname = \"r\"\npath = \"/m/r.rkllm\"\nreranker = true\n",
    )
    .unwrap();
    assert!(
        npu.contains("models.reranker") && npu.contains("tokenizer"),
        "{npu}"
    );
    assert_eq!(field("[[models]]\nname = \"r\"\nreranker = true\n"), None);
}

#[test]
fn a_prefill_chunk_is_zero_or_at_least_the_least_and_defaults_to_its_constant() {
    let with = |line: &str| {
        let config: Config =
            toml::from_str(&format!("[[models]]\nname = \"m\"\n{line}\n")).unwrap();
        config
            .validate()
            .map(|()| config.model_specs()[0].settings.prefill_chunk())
    };
    for bad in ["prefill_chunk_tokens = 8", "prefill_chunk_tokens = 2000000"] {
        assert_eq!(
            key_of(with(bad).unwrap_err()),
            "models.prefill_chunk_tokens",
            "{bad}"
        );
    }
    assert_eq!(with("prefill_chunk_tokens = 0").unwrap(), 0);
    assert_eq!(with("prefill_chunk_tokens = 16").unwrap(), 16);
    assert_eq!(
        with("").unwrap(),
        crate::model::DEFAULT_PREFILL_CHUNK_TOKENS
    );
}
