"""The final loss of a tf-agents run: its `Losses/*` tags, written as the
agents write them (tensor summaries in a `tf.function`), and the same tags
as legacy `simple_value` scalars. Every file is real and read back by the
report through the CLI."""

from __future__ import annotations

import re

import numpy as np
import pytest

from keras_gradmon.alerts.events import format_number
from keras_gradmon.cli import main
from tests.report.writers import (
    norms,
    write_simple_values,
    write_tensor_scalars,
    write_tf_agents_losses,
)

STEPS = range(0, 50, 10)


def _report(capsys, *args) -> tuple[int, str]:
    code = main(["report", *map(str, args), "--no-plots"])
    return code, capsys.readouterr().out


def _loss_cell(out: str, run: str) -> str:
    row = next(line for line in out.splitlines() if line.startswith(run + " "))
    return re.split(r"\s{2,}", row)[1]


def _loss_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("final loss"))


def _curve(start: float, seed: int) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    values = start * np.exp(-0.1 * np.arange(len(STEPS))) + rng.uniform(0, 0.1, 5)
    return {step: float(np.float32(v)) for step, v in zip(STEPS, values)}


def test_dqn_total_loss_is_the_final_loss_with_its_components(tmp_path, capsys):
    run = tmp_path / "dqn"
    td, reg = _curve(2.0, 0), _curve(0.1, 1)
    total = {s: float(np.float32(td[s] + reg[s])) for s in STEPS}
    write_tensor_scalars(str(run), norms(STEPS))
    write_tf_agents_losses(
        str(run), {"td_loss": td, "reg_loss": reg, "total_loss": total}
    )
    code, out = _report(capsys, tmp_path)
    assert code == 0
    assert _loss_cell(out, "dqn") == format_number(total[40])
    assert _loss_line(out) == (
        f"final loss: {format_number(total[40])} (tf-agents Losses/total_loss at "
        f"step 40; reg_loss {format_number(reg[40])}, td_loss "
        f"{format_number(td[40])})"
    )


def test_bandit_loss_is_the_final_loss(tmp_path, capsys):
    loss = _curve(3.0, 2)
    write_tensor_scalars(str(tmp_path / "bandit"), norms(STEPS))
    write_tf_agents_losses(str(tmp_path / "bandit"), {"loss": loss})
    _, out = _report(capsys, tmp_path)
    assert _loss_cell(out, "bandit") == format_number(loss[40])
    assert _loss_line(out) == (
        f"final loss: {format_number(loss[40])} (tf-agents Losses/loss at step 40)"
    )


def test_sac_losses_without_a_total_are_summed_at_the_last_step(tmp_path, capsys):
    critic, actor, alpha = _curve(5.0, 3), _curve(-2.0, 4), _curve(0.5, 5)
    write_tensor_scalars(str(tmp_path / "sac"), norms(STEPS, "critic"))
    losses = {"critic_loss": critic, "actor_loss": actor, "alpha_loss": alpha}
    write_tf_agents_losses(str(tmp_path / "sac"), losses, name_scope="Losses")
    _, out = _report(capsys, tmp_path)
    # SAC's own total: LossInfo.loss = critic_loss + actor_loss + alpha_loss
    total = np.float64(critic[40]) + actor[40] + alpha[40]
    assert _loss_cell(out, "sac [critic]") == format_number(total)
    assert _loss_line(out) == (
        f"final loss: {format_number(total)} (sum of tf-agents Losses/ at step "
        f"40: actor_loss {format_number(actor[40])}, alpha_loss "
        f"{format_number(alpha[40])}, critic_loss {format_number(critic[40])})"
    )


def test_ppo_sum_leaves_out_entropy_and_the_absolute_total(tmp_path, capsys):
    parts = {
        "policy_gradient_loss": _curve(0.3, 6),
        "value_estimation_loss": _curve(4.0, 7),
        "l2_regularization_loss": _curve(0.01, 8),
        "entropy_regularization_loss": _curve(-0.05, 9),
        "kl_penalty_loss": _curve(0.02, 10),
    }
    extra = {"entropy": _curve(1.4, 11), "total_abs_loss": _curve(9.0, 12)}
    write_tensor_scalars(str(tmp_path / "ppo"), norms(STEPS))
    write_tf_agents_losses(str(tmp_path / "ppo"), {**parts, **extra})
    _, out = _report(capsys, tmp_path)
    total = sum(np.float64(p[40]) for p in parts.values())
    assert _loss_cell(out, "ppo") == format_number(total)
    line = _loss_line(out)
    assert "entropy " not in line and "total_abs_loss" not in line
    assert f"kl_penalty_loss {format_number(parts['kl_penalty_loss'][40])}" in line


def test_components_are_summed_at_the_last_step_they_all_recorded(tmp_path, capsys):
    # TD3-like: the actor is updated (and its loss written) every 20 steps,
    # and not at the critic's last step.
    critic = _curve(5.0, 13)
    actor = {s: v for s, v in _curve(-1.0, 14).items() if s in (0, 20)}
    write_tensor_scalars(str(tmp_path / "td3"), norms(STEPS))
    losses = {"critic_loss": critic, "actor_loss": actor}
    write_tf_agents_losses(str(tmp_path / "td3"), losses)
    _, out = _report(capsys, tmp_path)
    assert _loss_cell(out, "td3") == format_number(np.float64(critic[20]) + actor[20])
    assert "(sum of tf-agents Losses/ at step 20: actor_loss" in _loss_line(out)


def test_simple_value_scalars_read_like_tensor_scalars(tmp_path, capsys):
    total = _curve(2.0, 15)
    series = {**norms(STEPS), "Losses/total_loss": total, "Losses/td_loss": total}
    write_simple_values(str(tmp_path / "v1"), series)
    write_tensor_scalars(str(tmp_path / "v2"), series)
    code, out = _report(capsys, tmp_path)
    assert code == 0
    assert _loss_cell(out, "v1") == _loss_cell(out, "v2") == format_number(total[40])
    assert "max 5 at step 40" in out


@pytest.mark.parametrize("keras_tag", ["epoch_loss", "loss"])
def test_keras_loss_comes_first(tmp_path, capsys, keras_tag):
    write_tensor_scalars(str(tmp_path), {**norms(STEPS), keras_tag: {0: 7.0, 4: 3.5}})
    write_tf_agents_losses(str(tmp_path), {"total_loss": _curve(2.0, 16)})
    _, out = _report(capsys, tmp_path)
    assert _loss_cell(out, tmp_path.name) == "3.5"
    assert _loss_line(out) == "final loss: 3.5"
