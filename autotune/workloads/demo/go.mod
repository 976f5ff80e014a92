module autotune/demo

go 1.25
