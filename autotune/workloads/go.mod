module autotune/workloads

go 1.25
