//! The special tokens, ids and chat template of each model family the tiny
//! vocabularies imitate: Llama 3 (`llama-bpe`), Qwen2 (`qwen2`, ChatML), Phi-4 (`dbrx`),
//! Phi-4-mini (`gpt-4o`), Mistral's Tekken (`tekken`), GLM-4 (`glm4`), GPT-2 (`gpt-2`), gpt-oss
//! (`gpt-4o` with harmony's tokens: [`HARMONY`]), Seed-OSS (`seed-coder`), LFM2 (`lfm2`), Cohere's
//! Command models (`command-r`), MiniMax-M2 (`minimax-m2`), DeepSeek-V3 (`deepseek-v3`), and Llama 2's `[INST]` template for the
//! SentencePiece style.

pub(super) struct Gpt2Family {
    /// (text, is_control): control tokens are special; the others user-defined.
    pub added: &'static [(&'static str, bool)],
    pub bos: &'static str,
    pub eos: &'static str,
    pub eot: Option<&'static str>,
    pub pad: &'static str,
    pub add_bos: bool,
    pub chat_template: &'static str,
}

const CHATML_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const LLAMA3_TEMPLATE: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

const GPT2_TEMPLATE: &str = "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}";

pub(super) const LLAMA2_TEMPLATE: &str = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% endfor %}";

/// Mistral's `[INST]` template as its Tekken models write it (no spaces around the tags).
const MISTRAL_TEKKEN_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST]' + message['content'] + '[/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}";

/// Phi-4's template (`<|im_sep|>` after the role).
const PHI4_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}";

/// GLM-4-0414's template, its tool parts left out: `[gMASK]<sop>`, then each message after its
/// role tag and a newline; the reply follows `<|assistant|>`.
const GLM4_TEMPLATE: &str = "[gMASK]<sop>{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

/// Seed-OSS's own template (llama.cpp's copy): `<seed:bos>role\n…<seed:eos>` turns, reasoning in
/// `<seed:think>`, calls in `<seed:tool_call>`.
const SEED_OSS_TEMPLATE: &str = include_str!("../../chat/fixtures/bytedance-seed-oss.jinja");

/// Phi-3's and Phi-4-mini's template (`<|role|>` tags, `<|end|>` after each message).
const PHI3_TEMPLATE: &str = "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

/// gpt-oss's (o200k_harmony): harmony's special tokens, `<|return|>` as EOS, its own template.
pub(super) const HARMONY: Gpt2Family = Gpt2Family {
    added: &[
        ("<|startoftext|>", true),
        ("<|endoftext|>", true),
        ("<|return|>", true),
        ("<|constrain|>", true),
        ("<|channel|>", true),
        ("<|start|>", true),
        ("<|end|>", true),
        ("<|message|>", true),
        ("<|call|>", true),
    ],
    bos: "<|startoftext|>",
    eos: "<|return|>",
    eot: None,
    pad: "<|endoftext|>",
    add_bos: false,
    chat_template: include_str!("../../chat/fixtures/openai-gpt-oss-120b.jinja"),
};

/// Seed-OSS's vocabulary (Seed-Coder's split): its turn, reasoning and call tokens, all special.
const SEED_CODER: Gpt2Family = Gpt2Family {
    added: &[
        ("<seed:bos>", true),
        ("<seed:eos>", true),
        ("<seed:pad>", true),
        ("<seed:think>", true),
        ("</seed:think>", true),
        ("<seed:tool_call>", true),
        ("</seed:tool_call>", true),
        ("<seed:cot_budget_reflect>", true),
        ("</seed:cot_budget_reflect>", true),
    ],
    bos: "<seed:bos>",
    eos: "<seed:eos>",
    eot: None,
    pad: "<seed:pad>",
    add_bos: false,
    chat_template: SEED_OSS_TEMPLATE,
};

/// MiniMax-M2's vocabulary: its turn marks (`]~!b[` opens the text, `]~b]` a role's turn, `[e~[`
/// ends one: its EOS), reasoning tags and call wrapper, all special here (the harder case for
/// the reply's text, which keeps the tags and the wrapper), and its template (llama.cpp's
/// copy), which writes `]~!b[` itself.
const MINIMAX_M2: Gpt2Family = Gpt2Family {
    added: &[
        ("]~!b[", true),
        ("]~b]", true),
        ("[e~[", true),
        ("<think>", true),
        ("</think>", true),
        ("<minimax:tool_call>", true),
        ("</minimax:tool_call>", true),
    ],
    bos: "]~!b[",
    eos: "[e~[",
    eot: None,
    pad: "[e~[",
    add_bos: false,
    chat_template: include_str!("../../chat/fixtures/minimax-m2.jinja"),
};

/// DeepSeek-V3's vocabulary (`deepseek-v3`): its turn marks, reasoning tags and tool-call
/// marks, all special, and DeepSeek-V3.1's template (llama.cpp's copy), which writes the BOS
/// itself.
const DEEPSEEK3: Gpt2Family = Gpt2Family {
    added: &[
        ("<｜begin▁of▁sentence｜>", true),
        ("<｜end▁of▁sentence｜>", true),
        ("<｜User｜>", true),
        ("<｜Assistant｜>", true),
        ("<think>", true),
        ("</think>", true),
        ("<｜tool▁calls▁begin｜>", true),
        ("<｜tool▁calls▁end｜>", true),
        ("<｜tool▁call▁begin｜>", true),
        ("<｜tool▁call▁end｜>", true),
        ("<｜tool▁sep｜>", true),
        ("<｜tool▁output▁begin｜>", true),
        ("<｜tool▁output▁end｜>", true),
    ],
    bos: "<｜begin▁of▁sentence｜>",
    eos: "<｜end▁of▁sentence｜>",
    eot: None,
    pad: "<｜end▁of▁sentence｜>",
    add_bos: false,
    chat_template: include_str!("../../chat/fixtures/deepseek-v3.1.jinja"),
};

/// GLM-4 (0414): its template writes `[gMASK]<sop>` itself, no BOS is added; a turn ends
/// at the next role tag (`<|user|>` is its EOT, `<|observation|>` follows a tool call).
const GLM4: Gpt2Family = Gpt2Family {
    added: &[
        ("<|endoftext|>", true),
        ("[MASK]", true),
        ("[gMASK]", true),
        ("[sMASK]", true),
        ("<sop>", true),
        ("<eop>", true),
        ("<|system|>", true),
        ("<|user|>", true),
        ("<|assistant|>", true),
        ("<|observation|>", true),
    ],
    bos: "<|endoftext|>",
    eos: "<|endoftext|>",
    eot: Some("<|user|>"),
    pad: "<|endoftext|>",
    add_bos: false,
    chat_template: GLM4_TEMPLATE,
};

/// Cohere's Command models' vocabulary (`command-r`): its turn and role marks, Command R7B's
/// response, thinking and action marks, all special; a plain Command template (turns as
/// `<|START_OF_TURN_TOKEN|><|USER_TOKEN|>…<|END_OF_TURN_TOKEN|>`, the reply after
/// `<|CHATBOT_TOKEN|>`), BOS added.
const COHERE: Gpt2Family = Gpt2Family {
    added: &[
        ("<PAD>", true),
        ("<BOS_TOKEN>", true),
        ("<|END_OF_TURN_TOKEN|>", true),
        ("<|START_OF_TURN_TOKEN|>", true),
        ("<|USER_TOKEN|>", true),
        ("<|CHATBOT_TOKEN|>", true),
        ("<|SYSTEM_TOKEN|>", true),
        ("<|START_RESPONSE|>", true),
        ("<|END_RESPONSE|>", true),
        ("<|START_THINKING|>", true),
        ("<|END_THINKING|>", true),
        ("<|START_ACTION|>", true),
        ("<|END_ACTION|>", true),
    ],
    bos: "<BOS_TOKEN>",
    eos: "<|END_OF_TURN_TOKEN|>",
    eot: None,
    pad: "<PAD>",
    add_bos: true,
    chat_template: COHERE_TEMPLATE,
};

const COHERE_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{% set role = '<|SYSTEM_TOKEN|>' %}{% elif message['role'] == 'user' %}{% set role = '<|USER_TOKEN|>' %}{% else %}{% set role = '<|CHATBOT_TOKEN|>' %}{% endif %}{{ '<|START_OF_TURN_TOKEN|>' + role + message['content'] | trim + '<|END_OF_TURN_TOKEN|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}";

/// LFM2's vocabulary: ChatML's turn marks, the tool list, call and response marks, all special,
/// and LFM2-8B-A1B's template (llama.cpp's copy: the tools listed between `<|tool_list_start|>`
/// and `<|tool_list_end|>`, results between the response marks).
const LFM2: Gpt2Family = Gpt2Family {
    added: &[
        ("<|pad|>", true),
        ("<|startoftext|>", true),
        ("<|endoftext|>", true),
        ("<|im_start|>", true),
        ("<|im_end|>", true),
        ("<|tool_list_start|>", true),
        ("<|tool_list_end|>", true),
        ("<|tool_call_start|>", true),
        ("<|tool_call_end|>", true),
        ("<|tool_response_start|>", true),
        ("<|tool_response_end|>", true),
    ],
    bos: "<|startoftext|>",
    eos: "<|im_end|>",
    eot: None,
    pad: "<|pad|>",
    add_bos: true,
    chat_template: include_str!("../../chat/fixtures/lfm2-8b-a1b.jinja"),
};

/// ModernBERT's vocabulary (OLMo's BPE with BERT's marks): `[CLS]` first, `[SEP]` last,
/// `[MASK]` (which takes the whitespace to its left where the file's name says `modern-bert`).
const MODERN_BERT: Gpt2Family = Gpt2Family {
    added: &[
        ("<|endoftext|>", true),
        ("[UNK]", true),
        ("[CLS]", true),
        ("[SEP]", true),
        ("[PAD]", true),
        ("[MASK]", true),
    ],
    bos: "[CLS]",
    eos: "[SEP]",
    eot: None,
    pad: "[PAD]",
    add_bos: true,
    chat_template: GPT2_TEMPLATE,
};

/// Qwen2.5-Coder's vocabulary: ChatML's marks and its fill-in-the-middle tokens, all special
/// (see `TinyModelSpec::coder`).
const QWEN_CODER: Gpt2Family = Gpt2Family {
    added: &[
        ("<|endoftext|>", true),
        ("<|im_start|>", true),
        ("<|im_end|>", true),
        ("<|fim_prefix|>", true),
        ("<|fim_middle|>", true),
        ("<|fim_suffix|>", true),
        ("<|fim_pad|>", true),
        ("<|repo_name|>", true),
        ("<|file_sep|>", true),
    ],
    bos: "<|endoftext|>",
    eos: "<|endoftext|>",
    eot: None,
    pad: "<|endoftext|>",
    add_bos: false,
    chat_template: CHATML_TEMPLATE,
};

pub(super) fn gpt2_family(pre: &str) -> Gpt2Family {
    match pre {
        // Mistral Nemo, Mistral Small 3.x, Ministral, Devstral.
        "tekken" => Gpt2Family {
            added: &[
                ("<unk>", true),
                ("<s>", true),
                ("</s>", true),
                ("[INST]", true),
                ("[/INST]", true),
                // Control tokens of Mistral's tool calls (named form: `[TOOL_CALLS]name[ARGS]{...}`).
                ("[TOOL_CALLS]", true),
                ("[ARGS]", true),
                // Magistral's reasoning markers, special tokens too.
                ("[THINK]", true),
                ("[/THINK]", true),
            ],
            bos: "<s>",
            eos: "</s>",
            eot: None,
            pad: "<unk>",
            add_bos: true,
            chat_template: MISTRAL_TEKKEN_TEMPLATE,
        },
        // Phi-4 (tiktoken's cl100k).
        "dbrx" => Gpt2Family {
            added: &[
                ("<|endoftext|>", true),
                ("<|im_start|>", true),
                ("<|im_end|>", true),
                ("<|im_sep|>", true),
            ],
            bos: "<|endoftext|>",
            eos: "<|endoftext|>",
            eot: None,
            pad: "<|endoftext|>",
            add_bos: false,
            chat_template: PHI4_TEMPLATE,
        },
        // Phi-4-mini (tiktoken's o200k).
        "gpt-4o" => Gpt2Family {
            added: &[
                ("<|endoftext|>", true),
                ("<|system|>", true),
                ("<|user|>", true),
                ("<|assistant|>", true),
                ("<|end|>", true),
            ],
            bos: "<|endoftext|>",
            eos: "<|endoftext|>",
            eot: None,
            pad: "<|endoftext|>",
            add_bos: false,
            chat_template: PHI3_TEMPLATE,
        },
        "llama-bpe" | "llama3" => Gpt2Family {
            added: &[
                ("<|begin_of_text|>", true),
                ("<|end_of_text|>", true),
                ("<|start_header_id|>", true),
                ("<|end_header_id|>", true),
                ("<|eot_id|>", true),
            ],
            bos: "<|begin_of_text|>",
            eos: "<|end_of_text|>",
            eot: Some("<|eot_id|>"),
            pad: "<|end_of_text|>",
            add_bos: true,
            chat_template: LLAMA3_TEMPLATE,
        },
        "glm4" => GLM4,
        "seed-coder" => SEED_CODER,
        "lfm2" => LFM2,
        "command-r" => COHERE,
        "minimax-m2" => MINIMAX_M2,
        "deepseek-v3" => DEEPSEEK3,
        "kormo" => QWEN_CODER,
        "qwen2" | "qwen35" => Gpt2Family {
            added: &[
                ("<|endoftext|>", true),
                ("<|im_start|>", true),
                ("<|im_end|>", true),
                ("<tool_call>", false),
                ("</tool_call>", false),
            ],
            bos: "<|endoftext|>",
            eos: "<|im_end|>",
            eot: None,
            pad: "<|endoftext|>",
            add_bos: false,
            chat_template: CHATML_TEMPLATE,
        },
        "modern-bert" => MODERN_BERT,
        _ => Gpt2Family {
            added: &[("<|endoftext|>", true)],
            bos: "<|endoftext|>",
            eos: "<|endoftext|>",
            eot: None,
            pad: "<|endoftext|>",
            add_bos: false,
            chat_template: GPT2_TEMPLATE,
        },
    }
}
