module autotune/loadgen

go 1.25
