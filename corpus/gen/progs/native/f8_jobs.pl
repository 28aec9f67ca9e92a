#!/usr/bin/perl
# f8b- tuning cases: Perl glue steps of an HPC pipeline failing the ways perldiag lists
# (perl pod/perldiag.pod): a missing module, malloc failure, run-time errors, an uncaught die.
# Usage: perl f8_jobs.pl MODE [ARG]
use strict;
use warnings;
$| = 1;

my ($mode, $arg) = @ARGV;

sub shards { my ($n) = @_; print "shard $_ indexed\n" for 1 .. $n }

if ($mode eq 'use_missing') {          # compile-time: use inside a string eval-free BEGIN
    print "building the sample sheet\n";
    eval "use Bio::DB::HTS::Tabix; 1" or die $@;
} elsif ($mode eq 'require_missing') {   # run time, a module path under a namespace
    print "exporting metrics to parquet\n";
    require Parquet::Writer::Simple;
} elsif ($mode eq 'oom') {             # an array of big strings under an address-space limit
    print "caching token windows\n";
    my @win;
    for (my $i = 0; ; $i++) {
        push @win, "t" x 65536;
        print "$i windows\n" if $i % 2000 == 0;
    }
} elsif ($mode eq 'oom_large') {       # one large request (a string of ARG MiB)
    print "reading the whole index into one buffer\n";
    my $buf = "\0" x ($arg * 1024 * 1024);
    print length($buf), "\n";
} elsif ($mode eq 'method_undef') {    # a lookup that returned nothing, then a method call
    my %writers = (train => undef);
    shards(2);
    $writers{valid}->close();
} elsif ($mode eq 'not_hash') {        # a config entry of the wrong shape
    my $cfg = { folds => [1, 2, 3] };
    print "folds: ", scalar(@{ $cfg->{folds} }), "\n";
    my $k = $cfg->{folds}{count};
    print "$k\n";
} elsif ($mode eq 'modulus') {         # round-robin over zero workers
    my @workers = ();
    shards(3);
    my $w = 7 % scalar(@workers);
} elsif ($mode eq 'die_fh') {          # an uncaught die while reading a manifest
    open(my $fh, '<', $arg) or die "cannot read manifest $arg: $!";
    while (my $l = <$fh>) {
        chomp $l;
        die "manifest row has no checksum column\n" if 0;
        my @f = split /\t/, $l;
        die "bad manifest row '$l': expected 3 columns, got " . scalar(@f) if @f != 3;
        print "ok $f[0]\n";
    }
} elsif ($mode eq 'open_missing') {    # a missing input
    open(my $fh, '<', $arg) or die "Can't open $arg: $!";
} elsif ($mode eq 'caught_exit0') {     # the error is printed, the work stops, exit 0
    my %writers = (train => undef);
    print "flushing 2 writers\n";
    eval { $writers{train}->flush(); 1 } or do {
        print STDERR $@;
        print STDERR "ERROR: writer lost, cannot continue\n";
        exit 0;
    };
} elsif ($mode eq 'warn_ok') {         # warnings, then the job finishes
    my %n;
    for my $i (1 .. 3) { my $x; print "row $i: " . ($x + $i) . "\n" }
    print "done, 0 errors\n";
} else {
    die "unknown mode $mode\n";
}
