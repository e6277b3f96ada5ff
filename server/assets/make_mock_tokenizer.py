#!/usr/bin/env python3
"""Writes mock-tokenizer.json: the small byte-level BPE tokenizer of the mock
backend's model (and of the runtime test double's logits mode), in Hugging
Face's tokenizer.json format, so that constrained generation runs off-device
over a real vocabulary.

The vocabulary: the 256 bytes, then pieces of JSON and of the mock's words
(each a token of several bytes, as a real tokenizer has), then the end-of-text
token. It has no merges (a BPE model may have none): the server reads each
token's bytes and never tokenizes with it.

Run: python3 server/assets/make_mock_tokenizer.py > server/assets/mock-tokenizer.json
"""

import json


def bytes_to_unicode():
    """GPT-2's reversible byte-to-character map of byte-level BPE."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = kept[:]
    n = 0
    for b in range(256):
        if b not in kept:
            kept.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(kept, map(chr, chars)))


BYTE = bytes_to_unicode()

PIECES = [
    # JSON structure
    '{"', '"}', '":', '": "', '",', '", "', '": ', ', "', '{}', '[]', '[', ']', '{', '}',
    '"', ':', ',', ' ', '\n', '  ', '    ', 'true', 'false', 'null', '0', '1', '42',
    '.5', '-', 'name', 'age', 'city', 'items', 'type', 'id', 'value', 'arguments',
    '<tool_call>', '</tool_call>', '<think>', '</think>',
    # the mock's words (backend/mock.rs WORDS), with their leading space
    ' the', ' NPU', ' streams', ' tokens', ' quickly', ' to', ' every', ' client',
    ' board', ' orange', ' rock', ' small', ' fast', ' binary', ' and', ' with', ' a',
    ' test', 'test', 'Paris', ' is', ' ok',
]


def main():
    vocab = {}
    for b in range(256):
        vocab[BYTE[b]] = b
    for piece in PIECES:
        encoded = "".join(BYTE[b] for b in piece.encode("utf-8"))
        if encoded not in vocab:
            vocab[encoded] = len(vocab)
    eos = len(vocab)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": eos, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    print(json.dumps(tokenizer, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
