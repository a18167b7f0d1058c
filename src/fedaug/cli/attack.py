"""``fedaug attack <name>``: one sub-command per registered attack (see :mod:`fedaug.attacks`)."""

from __future__ import annotations

import argparse

from fedaug import registry

EXAMPLES = {
    "context": 'fedaug attack context "FLea r10=runs/x/.../flea/seed0@10" FedMix=runs/x/.../fedmix/seed0 \\\n'
    "      --sizes 100,300,1000,3000,10000 --repeats 3 --out attack_ctx",
    "frontier": 'fedaug attack frontier "lambda2 0=runs/p_l0/.../flea" "lambda2 3=runs/p/.../flea" \\\n'
    "      --attacks attack_rec attack_ctx --reference FedAvg=runs/p/.../fedavg --out frontier",
    "summary": "fedaug attack summary attacks/seed0 attacks/seed1 attacks/seed2 --out attack_summary",
    "invert": "fedaug attack invert --model lenet5 --stages untrained,converged \\\n"
    "      --checkpoint runs/.../ckpt/latest.pt --severities 0,3,10 --out attack_inv",
    "invert-frontier": "fedaug attack invert-frontier runs/fedaugmix_mnist runs/fedaugmix_sev3 \\\n"
    "      --invert attack_inv/seed0 attack_inv/seed1 --out severity_frontier",
    "reconstruct": 'fedaug attack reconstruct "FLea r10=runs/x/.../flea/seed0@10" \\\n'
    "      FedMix=runs/x/.../fedmix/seed0 --decoders conv4,deep --out attack_rec",
}
"""An example command line per attack, shown by ``fedaug attack NAME --help``."""


def add_attack_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``attack``; its sub-parsers, one per registered attack, are added when ``fedaug attack ...`` is
    parsed (the attack modules import torch: ``fedaug --help`` and the other commands do not wait for it)."""
    sub.add_parser(
        "attack",
        help="privacy attacks (reconstruction, context, inversion)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples (a target is [LABEL=]RUN_DIR[@ROUND]; fedaug attack ATTACK --help: its options):\n"
        f"  {EXAMPLES['reconstruct']}\n  {EXAMPLES['invert']}",
        populate=add_attacks,
    )


def add_attacks(attack: argparse.ArgumentParser) -> None:
    """One sub-parser of ``attack`` per registered attack (imports the attack modules)."""
    raw = argparse.RawDescriptionHelpFormatter
    attacks = attack.add_subparsers(dest="attack", required=True, metavar="ATTACK")
    for name in registry.available("attack"):
        command = registry.get("attack", name)
        example = EXAMPLES.get(name)
        parser = attacks.add_parser(
            name, help=command.help, formatter_class=raw, epilog=f"example:\n  {example}" if example else None
        )
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)
