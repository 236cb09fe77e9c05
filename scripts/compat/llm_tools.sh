#!/usr/bin/env bash
# ContraiCallback inside LLaMA-Factory and Axolotl, each in its own venv with the tool's own pins
# (both install from PyPI on CPU): a LoRA SFT (r 8, q/v) of SmolLM2-135M on real e-mails through
# main, contraction (units pruned, the adapters merged) and refine, then llm_tools/check.py on what
# the run wrote. By hand, not in CI: each venv takes minutes to install, each job 5-10 on 2 cores.
#
#   scripts/compat/llm_tools.sh [llamafactory] [axolotl]      (default: both)
#
# LLaMA-Factory's job attaches through contrai.integrations.llamafactory.attach_on_build, Axolotl's through the
# plugin contrai.integrations.axolotl.ContraiPlugin. The package is built once as a wheel by the main venv.
# Environment: CONTRAI_LLM (the SmolLM2 folder: scripts/fixtures/smollm2.py makes it),
# CONTRAI_MAIN_VENV (default ~/.cache/contrai-ci-venv), CONTRAI_COMPAT_ROOT (default ~/.cache: the
# venvs contrai-llamafactory-venv and contrai-axolotl-venv), OUT (default /tmp/contrai-llm-tools).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/scripts/compat/llm_tools"
LLM=${CONTRAI_LLM:?set CONTRAI_LLM to the SmolLM2 folder (python scripts/fixtures/smollm2.py DIR)}
MAIN=${CONTRAI_MAIN_VENV:-$HOME/.cache/contrai-ci-venv}
CACHE=${CONTRAI_COMPAT_ROOT:-$HOME/.cache}
OUT=${OUT:-/tmp/contrai-llm-tools}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-py} HF_HUB_OFFLINE=1
TOOLS=("$@")
[ ${#TOOLS[@]} -gt 0 ] || TOOLS=(llamafactory axolotl)

python3 "$HERE/make_data.py" "$ROOT/../shared/data/spamassassin.jsonl" "$OUT/data"
rm -rf "$OUT/wheel"
"$MAIN/bin/pip" wheel -q --no-deps "$ROOT/crates/contrai-py" -w "$OUT/wheel"

for tool in "${TOOLS[@]}"; do
    venv="$CACHE/contrai-$tool-venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$tool"
    "$venv/bin/pip" install -q --no-deps --force-reinstall "$OUT"/wheel/contrai_ml-*.whl
    out="$OUT/$tool"
    rm -rf "$out"
    mkdir -p "$out"
    start=$(date +%s)
    case $tool in
        llamafactory) "$venv/bin/python" "$HERE/run_llamafactory.py" "$LLM" "$OUT/data" "$out" > "$out/log" 2>&1 ;;
        axolotl)
            sed -e "s|@LLM@|$LLM|; s|@DATA@|$OUT/data|g; s|@OUT@|$out|g; s|@RECIPE@|$HERE/recipe.toml|" \
                "$HERE/axolotl.yml" > "$out/config.yml"
            # Axolotl's launcher runs `accelerate` from PATH.
            PATH="$venv/bin:$PATH" axolotl train "$out/config.yml" > "$out/log" 2>&1 ;;
        *) echo "unknown tool $tool (llamafactory | axolotl)" >&2; exit 2 ;;
    esac
    echo "$tool $("$venv/bin/pip" show "$tool" | sed -n 's/^Version: //p'), transformers" \
         "$("$venv/bin/pip" show transformers | sed -n 's/^Version: //p'), peft" \
         "$("$venv/bin/pip" show peft | sed -n 's/^Version: //p'): $(( $(date +%s) - start )) s"
    "$venv/bin/python" "$HERE/check.py" "$out/run" "$LLM"
done
