/* The --gpualert[=OPTS] grammar, mirrored by gpualert_slurm.core.options.parse_options() and held
 * equal to it by tests/test_option_parity.py. */
#include "options.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

/* The option as the user gave it: opt_given, and its value ("" for bare --gpualert). Static
 * because SPANK calls opt_cb with no pointer of ours: this is where the option's value lives
 * in each process (sbatch/srun, slurmstepd and the tasks it forks). */
static int opt_given;
static char opt_value[OPTS_MAX + 1];

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option gpualert_option = {
    "gpualert", "[OPTS]",
    "Report why the job failed (OPTS: off | comma-separated mail=ADDR[:ADDR], "
    "notify=fail|always|never, artifacts=GLOB[:GLOB], hang=DURATION, budget=SIZE, "
    "checkpoint=GLOB, recover=on|off)",
    2, 0, opt_cb};

/* ------------------------------------------------------------------ option grammar */

static const char *const known_keys[] = {"mail", "notify", "artifacts", "hang",
                                         "budget", "checkpoint", "recover"};
#define NKEYS (sizeof(known_keys) / sizeof(known_keys[0]))

static int is_addr_char(int c)
{
    return isalnum(c) || strchr("._%+-", c) != NULL;
}

/* local@domain: a non-empty local part, a dotted domain of [A-Za-z0-9-] labels. */
static int valid_addr(const char *s, size_t n)
{
    const char *at = memchr(s, '@', n);
    if (!at || at == s || at == s + n - 1)
        return 0;
    for (const char *p = s; p < at; p++)
        if (!is_addr_char((unsigned char)*p))
            return 0;
    size_t label = 0;
    for (const char *p = at + 1; p < s + n; p++) {
        if (*p == '.') {
            if (label == 0)
                return 0;
            label = 0;
        } else if (isalnum((unsigned char)*p) || *p == '-') {
            label++;
        } else {
            return 0;
        }
    }
    return label > 0;
}

/* A glob: no control characters (',' separates options, ':' list items). */
static int valid_glob(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == ',')
            return 0;
    return 1;
}

/* ITEM[:ITEM...], each item checked by ok(). */
static int valid_list(const char *v, int (*ok)(const char *, size_t))
{
    const char *p = v;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (!ok(p, n))
            return 0;
        if (!colon)
            return 1;
        p = colon + 1;
    }
}

/* A positive number of at most maxdigits digits followed by one unit letter. */
static int valid_amount(const char *v, size_t maxdigits, const char *units)
{
    size_t digits = strspn(v, "0123456789");
    if (digits == 0 || digits > maxdigits || v[digits] == '\0' || v[digits + 1] != '\0')
        return 0;
    if (!strchr(units, v[digits]))
        return 0;
    return strtoll(v, NULL, 10) > 0;
}

static int check_value(const char *key, const char *v)
{
    if (!strcmp(key, "mail"))
        return valid_list(v, valid_addr);
    if (!strcmp(key, "notify"))
        return !strcmp(v, "fail") || !strcmp(v, "always") || !strcmp(v, "never");
    if (!strcmp(key, "artifacts"))
        return valid_list(v, valid_glob);
    if (!strcmp(key, "hang"))
        return valid_amount(v, 9, "smhd");
    if (!strcmp(key, "budget"))
        return valid_amount(v, 12, "kmgKMG");
    if (!strcmp(key, "checkpoint"))
        return valid_glob(v, strlen(v));
    if (!strcmp(key, "recover"))
        return !strcmp(v, "on") || !strcmp(v, "off");
    return 0;
}

static const char *accepted(const char *key)
{
    if (!strcmp(key, "mail"))
        return "one or more addresses local@domain separated by ':'";
    if (!strcmp(key, "notify"))
        return "fail, always or never";
    if (!strcmp(key, "artifacts"))
        return "one or more file globs separated by ':'";
    if (!strcmp(key, "hang"))
        return "a duration like 90s, 30m, 2h or 1d (greater than 0)";
    if (!strcmp(key, "budget"))
        return "a size like 500K, 20M or 1G (greater than 0)";
    if (!strcmp(key, "checkpoint"))
        return "one file glob";
    return "on or off";
}

/*
 * Validates OPTS. Returns 0, or -1 after writing the error to err (the form mirrored by
 * gpualert_slurm.core.options.parse_options()).
 */
int validate_opts(const char *opts, char *err, size_t errlen)
{
    if (strlen(opts) > OPTS_MAX) {
        snprintf(err, errlen, "gpualert: bad option list: longer than %d characters", OPTS_MAX);
        return -1;
    }
    if (!strcmp(opts, "off") || !strcmp(opts, "on"))
        return 0;
    if (*opts == '\0') {
        snprintf(err, errlen, "gpualert: empty option list (accepted: --gpualert, "
                 "--gpualert=off, --gpualert=KEY=VALUE[,KEY=VALUE...])");
        return -1;
    }
    char buf[OPTS_MAX + 1];
    int seen[NKEYS] = {0};
    snprintf(buf, sizeof(buf), "%s", opts);
    char *item = buf;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        const char *key = item, *val = eq ? eq + 1 : NULL;
        size_t k;
        for (k = 0; k < NKEYS && strcmp(key, known_keys[k]); k++)
            ;
        if (k == NKEYS) {
            if (!strcmp(key, "off") || !strcmp(key, "on"))
                snprintf(err, errlen, "gpualert: bad option %s: '%s' cannot be combined "
                         "with other options", key, key);
            else if (*key == '\0')
                snprintf(err, errlen, "gpualert: empty option in '%s' (accepted: "
                         "KEY=VALUE[,KEY=VALUE...])", opts);
            else
                snprintf(err, errlen, "gpualert: unknown option %s (accepted: mail, notify, "
                         "artifacts, hang, budget, checkpoint, recover, off)", key);
            return -1;
        }
        if (seen[k]++) {
            snprintf(err, errlen, "gpualert: bad option %s=%s: %s given twice", key,
                     val ? val : "", key);
            return -1;
        }
        if (!val || *val == '\0') {
            snprintf(err, errlen, "gpualert: bad option %s=: %s", key, accepted(key));
            return -1;
        }
        if (!check_value(key, val)) {
            snprintf(err, errlen, "gpualert: bad option %s=%s: %s", key, val, accepted(key));
            return -1;
        }
        if (!comma)
            return 0;
        item = comma + 1;
    }
}

/* Called wherever the option is seen: sbatch/srun (remote=0) and slurmstepd (remote=1). */
static int opt_cb(int val, const char *optarg, int remote)
{
    char err[3 * OPTS_MAX + 512];
    (void)val;
    /* Slurm 22.05 stores a bare --gpualert in SLURM_SPANK__..._gpualert as "(null)", which
     * srun inside the batch script then hands back to us; the batch step gets "". */
    if (optarg && (!strcmp(optarg, "(null)") || (remote && *optarg == '\0')))
        optarg = NULL;
    if (optarg && validate_opts(optarg, err, sizeof(err)) != 0) {
        slurm_error("%s", err);
        /* In slurmstepd the value was already accepted at submit: never fail a task here. */
        return remote ? 0 : -1;
    }
    opt_given = 1;
    snprintf(opt_value, sizeof(opt_value), "%s", optarg ? optarg : "");
    return 0;
}

void options_register(spank_t sp)
{
    if (spank_option_register(sp, &gpualert_option) != ESPANK_SUCCESS)
        slurm_error("gpualert: cannot register --gpualert");
}

/* What SPANK_GPUALERT carries: off, on, or the validated options. */
const char *gpualert_value(int default_on)
{
    if (!opt_given)
        return default_on ? "on" : "off";
    return opt_value[0] ? opt_value : "on";
}

int monitored(int default_on)
{
    return strcmp(gpualert_value(default_on), "off") != 0;
}
