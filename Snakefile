# rnnsearch: Bahdanau, Cho & Bengio (2015), from raw text to Table 1 and Figures 2-3.
#   snakemake --cores 2                                                   # embedded corpus, minutes
#   snakemake --cores all --configfile workflow/configs/paper.yaml        # the paper's configuration
# Every rule runs `rnnsearch <stage> ...`; the stage reads only the params it declares (rnnsearch.config).
from snakemake.utils import min_version

min_version("9.0")

report: "workflow/report/workflow.rst"  # the HTML report's landing page: Tables 1 and 2


# No `configfile: "params.yaml"`: common.smk reads params.yaml and the --configfile overlays with the loader every
# stage uses, whose errors name the file and line (a YAML error, a key given twice, a bad value).
include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/vocab.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/peer.smk"


onstart:
    rules.train.rule.restart_times = train_retries()  # exit 75 at Slurm's time limit: resubmitted, resumes
    if executor_name() == "slurm":
        slurm_plugin.mend()  # scancel stops a job; a memory kill says so (rnnsearch/slurm_plugin.py)


rule all:
    input:
        final_outputs(),
    default_target: True
