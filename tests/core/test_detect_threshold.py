"""The default threshold rule (``threshold="auto"``, ``auto_threshold``) against its definition and truth."""

import numpy as np
import pytest

from ivote.data import synthetic_nuclei
from ivote.detect import auto_threshold, iterative_voting, otsu_threshold
from ivote.metrics import match_points


def otsu_class_edge(scores):
    """Otsu's threshold of the log scores moved from its histogram bin's centre to its upper
    edge (half of one of 256 bins higher): the score between Otsu's two classes."""
    logs = np.log(scores[scores > 0])
    return otsu_threshold(scores) * np.exp((logs.max() - logs.min()) / 512)


def test_score_threshold_keeps_a_population_of_nuclei_that_otsu_splits():
    """Every maximum a nucleus, scores spread over a factor of 4: Otsu cuts the weaker
    half, the rule keeps everything within about 3x of the typical (median) nucleus above Otsu."""
    rng = np.random.default_rng(0)
    scores = np.exp(rng.uniform(np.log(50), np.log(200), 80))
    contrasts = np.full(80, 40.0)
    value, floor = auto_threshold(scores, contrasts)
    otsu = otsu_class_edge(scores)
    assert np.sum(scores >= otsu) < 70  # Otsu splits the nuclei
    assert value == pytest.approx(min(otsu, 0.3 * np.median(scores[scores >= otsu])))
    assert np.all(scores >= value)
    assert floor == 3.0  # one class of contrasts: the floor stays


def test_score_threshold_is_otsu_when_the_background_maxima_are_far_below():
    rng = np.random.default_rng(1)
    nuclei = np.exp(rng.normal(np.log(200), 0.2, 60))
    background = np.exp(rng.normal(np.log(5), 0.3, 60))
    scores = np.concatenate([nuclei, background])
    value, _ = auto_threshold(scores, np.full(120, 50.0))
    assert value == pytest.approx(otsu_class_edge(scores))
    assert np.all(nuclei >= value) and np.all(background < value)


def test_contrast_floor_drops_the_lower_of_two_contrast_classes():
    """Noise maxima scoring as well as nuclei (a large radius on a noisy image) but with
    contrasts of 4-6 against the nuclei's 40-80: the floor separates them."""
    rng = np.random.default_rng(2)
    scores = np.exp(rng.normal(np.log(100), 0.3, 50))
    contrasts = np.concatenate([rng.uniform(40, 80, 10), rng.uniform(3.5, 6, 40)])
    value, floor = auto_threshold(scores, contrasts)
    assert 6 <= floor < 40
    kept = (scores >= value) & (contrasts >= floor)
    np.testing.assert_array_equal(kept[10:], False)
    assert kept[:10].sum() >= 9


def test_contrast_floor_stays_for_one_class_no_test_or_no_noise():
    rng = np.random.default_rng(3)
    scores = np.exp(rng.normal(np.log(100), 0.3, 200))
    one_class = np.exp(rng.normal(np.log(30), 0.4, 200))
    assert auto_threshold(scores, one_class)[1] == 3.0
    assert auto_threshold(scores, one_class, min_contrast=5.0)[1] == 5.0
    two_classes = np.concatenate([np.full(100, 50.0), np.full(100, 4.0)]) * rng.uniform(0.9, 1.1, 200)
    assert auto_threshold(scores, two_classes, min_contrast=0.0)[1] == 0.0  # 0: no contrast test at all
    assert auto_threshold(scores, np.full(200, np.inf))[1] == 3.0  # noiseless image
    # ten maxima (a small 3D volume): the split is clear (eta >= 0.75) but its lower class
    # holds 3 maxima, under the 5 the rule needs (with so few, a dim nucleus can make it up)
    from ivote.detect._thresholds import _separability, _threshold_otsu

    few = np.array([120.0, 110, 100, 95, 90, 105, 98, 6, 5, 4])
    logs = np.log(few)
    split = _threshold_otsu(logs) + (logs.max() - logs.min()) / 512
    assert _separability(logs, split) >= 0.75 and 0 < np.sum(logs < split) < 5
    assert auto_threshold(np.linspace(1000, 100, 10), few)[1] == 3.0
    assert auto_threshold(np.zeros(0), np.zeros(0)) == (float("-inf"), 3.0)


def test_auto_is_the_default_and_refilters_alike():
    sample = synthetic_nuclei((128, 128), radius=6, overlap=0.3, seed=11)
    found = iterative_voting(sample.image, radius=6, backend="numpy")
    value, floor = auto_threshold(found.candidate_scores, found.candidate_contrasts, 3.0)
    assert found.threshold == value and found.min_contrast == floor
    assert match_points(found.points, sample.centers, tolerance=3).f1 >= 0.95
    again = found.with_threshold("otsu").with_threshold("auto", min_contrast=3.0)
    np.testing.assert_array_equal(again.points, found.points)
    assert again.min_contrast == floor


def test_few_nuclei_among_many_textured_maxima_set_the_threshold():
    """Five bright discs on a smooth textured background whose maxima (38 of 43) pass
    the contrast test: the typical nucleus comes from Otsu's upper class, so the
    texture's maxima stay out (a percentile of all maxima would let them in)."""
    from scipy import ndimage as ndi

    rng = np.random.default_rng(5)
    texture = ndi.gaussian_filter(rng.normal(0, 1, (192, 192)), 3)
    image = texture / texture.std() + rng.normal(0.0, 0.15, texture.shape)
    yy, xx = np.mgrid[:192, :192]
    centres = np.array([[48, 48], [48, 144], [144, 48], [144, 144], [96, 96]])
    for y, x in centres:
        image[(yy - y) ** 2 + (xx - x) ** 2 <= 14**2] += 10.0
    found = iterative_voting(image, radius=18, backend="numpy")
    assert np.sum(found.candidate_contrasts >= 3) > 30
    assert found.threshold == pytest.approx(otsu_class_edge(found.candidate_scores))  # not lowered into the texture
    f1 = match_points(found.points, centres, tolerance=6).f1
    assert f1 >= 0.9
    assert found.min_contrast > 3  # 43 maxima, but the discs' contrasts are over 2x the texture's: a gap
    # at the contrast test alone, a percentile of the maxima would let the texture in
    assert match_points(found.with_threshold("reference", min_contrast=3.0).points, centres, tolerance=6).f1 < f1 - 0.2
    assert match_points(found.with_threshold("auto", min_contrast=3.0).points, centres, tolerance=6).f1 >= 0.9


def test_a_few_nuclei_of_varied_brightness_are_not_split_by_contrast():
    """A 64² frame of 19 touching nuclei whose contrasts fall in two classes of brightness: the
    contrast split (meant for hundreds of texture maxima) must not drop the dimmer half."""
    sample = synthetic_nuclei((64, 64), spacing=(0.5, 0.5), radius=4.0, overlap=0.1, noise=0.05, seed=12, n_nuclei=40)
    auto = iterative_voting(sample.image, radius=4.0, spacing=(0.5, 0.5), backend="numpy")
    otsu = iterative_voting(sample.image, radius=4.0, spacing=(0.5, 0.5), threshold="otsu", backend="numpy")
    assert auto.min_contrast == 3.0
    assert len(auto.points) >= len(otsu.points)
    assert match_points(auto.points, sample.centers, tolerance=4).f1 >= 0.9


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_textured_image_keeps_only_maxima_that_score_like_nuclei(seed):
    """H&E-like maxima: 100 nuclei (score ~200, contrast 40-90), 200 texture maxima of
    low contrast (4-12, under the split) and 40 of tissue texture that pass the raised
    floor (contrast 30-60) scoring between them (~55). With a contrast split the score
    threshold is 0.4 x the typical nucleus's, which drops the in-between texture; the
    rule without a split (min of Otsu's and 0.3 x) keeps 11-21 of them."""
    rng = np.random.default_rng(seed)
    scores = np.concatenate([np.exp(rng.normal(np.log(200), 0.3, 100)), np.exp(rng.normal(np.log(20), 0.5, 200)),
                             np.exp(rng.normal(np.log(55), 0.2, 40))])
    contrasts = np.concatenate([rng.uniform(40, 90, 100), rng.uniform(4, 12, 200), rng.uniform(30, 60, 40)])
    value, floor = auto_threshold(scores, contrasts)
    assert 11 <= floor < 30  # the split drops the low-contrast texture
    kept = (scores >= value) & (contrasts >= floor)
    upper = scores[(contrasts >= floor) & (scores >= otsu_class_edge(scores))]
    assert value == pytest.approx(0.4 * np.median(upper))
    assert kept[:100].sum() >= 98 and kept[300:].sum() <= 4
    no_split = min(otsu_class_edge(scores), 0.3 * np.median(scores[scores >= otsu_class_edge(scores)]))
    assert ((scores >= no_split) & (contrasts >= floor))[300:].sum() >= 10  # what the split's rule avoids


def test_a_few_dim_maxima_below_the_contrast_split_are_not_texture():
    """A split whose lower class is 6 of 90 maxima (a few dim objects among bright nuclei, as
    on fluorescence images, 5-13% there against 23-57% on H&E): the floor rises, but the score
    threshold stays the lower of Otsu's and 0.3 x the typical nucleus's, keeping the weaker nuclei."""
    rng = np.random.default_rng(12)
    scores = np.concatenate([np.exp(rng.normal(np.log(200), 0.5, 84)), np.exp(rng.normal(np.log(20), 0.3, 6))])
    contrasts = np.concatenate([rng.uniform(40, 90, 84), rng.uniform(4, 7, 6)])
    value, floor = auto_threshold(scores, contrasts)
    assert floor < 40 and np.all(contrasts[84:] < floor)  # the split: the six dim maxima below
    otsu = otsu_class_edge(scores)
    assert value == pytest.approx(min(otsu, 0.3 * np.median(scores[(contrasts >= 3) & (scores >= otsu)])))
    kept = ((scores >= value) & (contrasts >= floor))[:84].sum()
    typical = np.median(scores[(contrasts >= floor) & (scores >= otsu)])
    assert kept >= 82 and kept >= np.sum(scores[:84] >= 0.4 * typical) + 2  # the texture rule would drop them


def test_few_maxima_split_by_contrast_only_across_a_gap():
    """24 maxima (an image of a few large nuclei, as dsb2018's dsb_027): 4 nuclei of contrast 35-60
    and 20 maxima of noise or debris of contrast 3.2-6 scoring as high as the dimmest nuclei. Too
    few maxima for Otsu's class statistics alone, but the contrasts leave a gap of more than 2x:
    the floor rises into it. The same number of maxima with contrasts spread without a gap (the
    brightness of a few dozen nuclei): the floor stays."""
    rng = np.random.default_rng(7)
    nuclei = np.array([1970.0, 770, 420, 310])
    debris = np.exp(rng.uniform(np.log(30), np.log(320), 20))
    scores = np.concatenate([nuclei, debris])
    contrasts = np.concatenate([rng.uniform(35, 60, 4), rng.uniform(3.2, 6, 20)])
    value, floor = auto_threshold(scores, contrasts)
    assert contrasts[4:].max() < floor <= contrasts[:4].min()
    kept = (scores >= value) & (contrasts >= floor)
    np.testing.assert_array_equal(kept, np.arange(24) < 4)
    spread = np.exp(np.linspace(np.log(5), np.log(60), 24))  # no gap anywhere
    assert auto_threshold(scores, rng.permutation(spread))[1] == 3.0


def _earlier_score_rule(scores, contrasts):
    """The score threshold before the small-sample gap: min(Otsu at its bin centre, 0.3 x typical)."""
    otsu = otsu_threshold(scores)
    upper = scores[(contrasts >= 3) & (scores >= otsu)]
    return min(otsu, 0.3 * float(np.median(upper)))


def test_a_few_maxima_keep_the_dim_nucleus_whatever_the_jitter():
    """A small volume (qcanet3d at its automatic radius): 8 nuclei scoring 146-1240 and one or two
    background maxima at 15-32. From 9-10 maxima Otsu's split falls below or above the dimmest
    nucleus as the scores move by a few percent (a 2% change of radius did it), and it sits at
    0.29-0.33 of the typical nucleus, on the edge of the 0.3 rule. The widest score gap (over 2x)
    below the typical nucleus holds the threshold: exactly the nuclei, for every jitter."""
    nuclei = np.array([1237.0, 676, 592, 502, 446, 437, 407, 146])
    rng = np.random.default_rng(8)
    earlier_flips = 0
    for draw in range(200):
        background = np.array([32.0, 15.0]) if draw % 2 else np.array([32.0])
        scores = np.concatenate([nuclei, background]) * np.exp(rng.normal(0, 0.03, 8 + len(background)))
        contrasts = np.concatenate([[240, 134, 84, 80, 68, 72, 67, 26], [10, 20][:len(background)]]).astype(float)
        value, floor = auto_threshold(scores, contrasts)
        kept = (scores >= value) & (contrasts >= floor)
        np.testing.assert_array_equal(kept, np.arange(len(scores)) < 8)
        earlier = scores >= _earlier_score_rule(scores, contrasts)
        earlier_flips += not np.array_equal(earlier, np.arange(len(scores)) < 8)
    assert earlier_flips >= 20  # what the gap rule fixes: the earlier rule lost or kept one maximum too many


def test_score_gap_rule_leaves_one_class_of_few_nuclei_whole():
    """20 maxima, every one a nucleus, scores spread over 4x without a gap of 2x: nothing is cut."""
    rng = np.random.default_rng(9)
    scores = np.exp(rng.uniform(np.log(60), np.log(240), 20))
    value, floor = auto_threshold(scores, np.full(20, 40.0))
    assert np.all(scores >= value) and floor == 3.0
    # with one background maximum 10x below them: it alone is dropped
    scores = np.append(scores, 8.0)
    value, _ = auto_threshold(scores, np.append(np.full(20, 40.0), 12.0))
    np.testing.assert_array_equal(scores >= value, np.arange(21) < 20)


def test_auto_again_on_an_auto_result_keeps_its_points():
    # two contrast classes: 'auto' raises the contrast floor; the same rule applied again must start from the
    # floor the detection was asked for, not the raised one (the raised floor gives another score threshold)
    from dataclasses import replace

    sample = synthetic_nuclei((96, 96), radius=5, seed=4)
    found = iterative_voting(sample.image, radius=7, threshold="none")
    rng = np.random.default_rng(0)
    n = 400
    contrasts = np.concatenate([rng.lognormal(np.log(4), 0.3, n), rng.lognormal(np.log(40), 0.3, n)])
    scores = np.concatenate([rng.lognormal(np.log(5), 0.5, n), rng.lognormal(np.log(50), 0.5, n)])
    order = np.argsort(-scores, kind="stable")
    candidates = rng.uniform(0, 96, (2 * n, 2))
    base = replace(found, candidates=candidates, candidate_scores=scores[order], candidate_contrasts=contrasts[order],
                   requested_min_contrast=found.min_contrast)
    once = base.with_threshold("auto")
    assert once.min_contrast > found.min_contrast  # the rule raised the floor
    twice = once.with_threshold("auto")
    np.testing.assert_array_equal(twice.points, once.points)
    assert twice.threshold == once.threshold and twice.min_contrast == once.min_contrast
    assert once.with_threshold("auto", once.min_contrast).threshold != once.threshold  # what the raised floor gives


def test_an_auto_detection_refiltered_with_auto_is_the_same_detection():
    sample = synthetic_nuclei((128, 128), radius=6, seed=5)
    found = iterative_voting(sample.image, radius=8)
    again = found.with_threshold("auto")
    np.testing.assert_array_equal(again.points, found.points)
    assert again.requested_min_contrast == found.requested_min_contrast
