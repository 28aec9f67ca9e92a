# R jobs for the f7r- tuning cases: an analysis script (Rscript) that stops at an error in
# several ways, and two that end well (rules r_* in classify/rules.yaml).
# Usage: Rscript f7_jobs.R MODE [ARG]
args <- commandArgs(trailingOnly = TRUE)
mode <- args[1]
cat("analysis: mode", mode, "\n")
set.seed(7)

if (mode == "collinear") {
  # a design matrix with a duplicated column: the normal equations are singular
  x <- matrix(rnorm(200), 50, 4)
  x <- cbind(x, x[, 2])
  y <- rnorm(50)
  fit_ols <- function(X, y) solve(crossprod(X), crossprod(X, y))
  beta <- fit_ols(x, y)
  print(beta)
} else if (mode == "package") {
  # a package the site library does not have
  suppressPackageStartupMessages(library(glmnetUtilsX))
} else if (mode == "kernel") {
  # a dense kernel matrix over all samples: more than the address space allows
  n <- as.integer(args[2])
  cat("building a", n, "x", n, "kernel\n")
  k <- matrix(0, n, n)
  print(dim(k))
} else if (mode == "cohort") {
  # the cohort table is not where the config says
  d <- read.csv(args[2])
  print(nrow(d))
} else if (mode == "check") {
  # the script's own stop() on a failed check, without the call
  folds <- split(1:100, rep(1:4, each = 25))
  if (length(folds) != 5) stop("expected 5 folds, got ", length(folds), call. = FALSE)
} else if (mode == "warn") {
  # warnings along the way; the run completes
  v <- c(4, -1, 9)
  r <- sqrt(v)
  print(r)
  cat("model saved\n")
} else if (mode == "handled") {
  # an error caught and reported; the run goes on with a fallback
  res <- tryCatch(solve(matrix(0, 2, 2)), error = function(e) {
    message("Error in the exact solve (", conditionMessage(e), "); using the pseudo-inverse")
    diag(2)
  })
  print(res)
  cat("done\n")
}
