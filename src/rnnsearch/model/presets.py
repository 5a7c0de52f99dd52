"""Model presets and ablation switches: a model is a named preset plus overrides, one key per switch.

    cell             gru | lstm                 the recurrent unit of encoder and decoder
    bidirectional    true | false               annotations [→h_j; ←h_j] (RNNsearch) or →h_j (RNNencdec)
    attention        additive | multiplicative | dot | none   (none: a fixed context c, as in RNNencdec)
    combined_output  false | true               false: the paper's deep maxout output, attention on s_{i−1};
                                                true: o_t = dropout(tanh(W_u[a_t; h_t])), attention on h_t
    input_feeding    false | true               the decoder's input is [E y_{t−1}; o_{t−1}] (combined output only)
    dropout          0 ≤ p < 1                  on the output layer's input (t_i, or o_t)
    coverage         none | linguistic | fertility | neural   the additive model's coverage (Tu et al. 2016)
    location_filters, location_width   k filters of width r over α_{i−1} (attention: location; 10, 5)
    coverage_size    d, the neural coverage's units per source word (coverage: neural; 10)

This module imports no torch, so configuration checks (Snakemake parses the workflow with them) stay quick.
"""

from __future__ import annotations

ATTENTIONS = ("additive", "multiplicative", "dot", "location", "none")
COVERAGES = ("none", "linguistic", "fertility", "neural")
# the alignment models' own sizes, each with the switch value it belongs to: set for another, it cannot take effect
OWN_SIZES = {"location_filters": ("attention", "location", 10), "location_width": ("attention", "location", 5),
             "coverage_size": ("coverage", "neural", 10)}

PRESETS: dict[str, dict] = {
    # the paper: bidirectional GRU encoder, additive attention on s_{i−1}, deep maxout output (App. A.2)
    "rnnsearch": {"cell": "gru", "bidirectional": True, "attention": "additive", "combined_output": False,
                  "input_feeding": False, "dropout": 0.0},
    # Cho et al. (2014a): unidirectional GRU encoder, fixed context c = tanh(V h_Tx), the same decoder
    "rnnencdec": {"cell": "gru", "bidirectional": False, "attention": "none", "combined_output": False,
                  "input_feeding": False, "dropout": 0.0},
    # Luong et al. (2015): BiLSTM, multiplicative attention on h_t, o_t = tanh(W_u[a_t; h_t])
    "luong": {"cell": "lstm", "bidirectional": True, "attention": "multiplicative", "combined_output": True,
              "input_feeding": True, "dropout": 0.3},
}
# switches a preset leaves out of its config when off (`coverage: none`), so that a model's config, which its
# checkpoints hold and a resumed training is checked against, is the one it had before they existed
OPTIONAL = ("coverage",)
SWITCHES = (*PRESETS["rnnsearch"], *OPTIONAL, *OWN_SIZES)
SIZES = ("m", "n", "n_align", "l")


def resolve(arch: str, sizes: dict, overrides: dict | None = None) -> dict:
    """The full model config: the preset `arch`, then `overrides` (any of SWITCHES), and the sizes."""
    if arch not in PRESETS:
        raise ValueError(f"unknown arch {arch!r}: expected one of {', '.join(PRESETS)}")
    cfg = {"arch": arch, **{k: sizes[k] for k in SIZES}, **PRESETS[arch]}
    cfg.update({k: v for k, v in (overrides or {}).items() if k in SWITCHES})
    problems = check(cfg)
    for key, (switch, value, default) in OWN_SIZES.items():
        if cfg.get(switch) == value:
            cfg.setdefault(key, default)
    if cfg.get("coverage") == "none":
        del cfg["coverage"]
    if problems:
        raise ValueError("; ".join(problems))
    return cfg


def check(cfg: dict) -> list[str]:
    """Combinations that cannot be built, each as a sentence naming the switch."""
    problems = []
    if cfg["attention"] not in ATTENTIONS:
        problems.append(f"attention {cfg['attention']!r}: expected one of {', '.join(ATTENTIONS)}")
    ctx = (2 if cfg["bidirectional"] else 1) * cfg["n"]
    if cfg["attention"] == "dot" and ctx != cfg["n"]:
        problems.append(f"attention 'dot' compares the decoder state (n={cfg['n']}) with annotations of size {ctx}: "
                        "it needs bidirectional: false (or use 'multiplicative')")
    if cfg.get("coverage", "none") not in COVERAGES:
        problems.append(f"coverage {cfg['coverage']!r}: expected one of {', '.join(COVERAGES)}")
    elif cfg.get("coverage", "none") != "none" and cfg["attention"] != "additive":
        problems.append(f"coverage {cfg['coverage']!r} extends the additive alignment model (Tu et al. 2016): it "
                        f"needs attention: additive, not {cfg['attention']!r}")
    for key, (switch, value, _) in OWN_SIZES.items():
        if key in cfg and cfg.get(switch, "none") != value:
            problems.append(f"{key} sizes {switch} '{value}', not {switch} {cfg.get(switch, 'none')!r}: it cannot "
                            "take effect")
    if cfg.get("location_width", 1) % 2 == 0:
        problems.append(f"location_width {cfg['location_width']}: the filters are centred on word j, so their "
                        "width is odd")
    if cfg["input_feeding"] and not cfg["combined_output"]:
        problems.append("input_feeding feeds o_{t-1} of the combined output: it needs combined_output: true")
    return problems


def model_config(config: dict, name: str) -> dict:
    """The resolved config of one model: its preset `arch`, the shared `model` sizes, then its own overrides
    (sizes and ablation switches) from `models.<name>`."""
    entry = config["models"][name]
    return resolve(entry["arch"], {**config["model"], **entry}, entry)
